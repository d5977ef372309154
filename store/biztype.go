package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

type bizTypeRow struct {
	bun.BaseModel `bun:"table:courier_biz_types"`

	Name           string    `bun:"name,pk"`
	Delivery       string    `bun:"delivery"`
	CallbackURL    string    `bun:"callback_url"`
	Secrets        string    `bun:"secrets"`
	Topic          string    `bun:"topic"`
	RequestTimeout int64     `bun:"request_timeout_ms"`
	RetryInitial   int64     `bun:"retry_initial_ms"`
	RetryBackoff   float64   `bun:"retry_backoff"`
	RetryMax       int64     `bun:"retry_max_ms"`
	MaxAttempts    int       `bun:"max_attempts"`
	RateLimit      float64   `bun:"rate_limit_per_second"`
	AllowPrivate   bool      `bun:"allow_private"`
	InsertRate     float64   `bun:"insert_rate_per_second"`
	InsertBurst    int       `bun:"insert_burst"`
	TimerMode      string    `bun:"timer_mode"`
	TimerRetention int64     `bun:"timer_retention_ms"`
	FailureURL     string    `bun:"failure_url"`
	FailureTopic   string    `bun:"failure_topic"`
	CreatedAt      time.Time `bun:"created_at,skipupdate"`
	UpdatedAt      time.Time `bun:"updated_at"`
}

func (r *bizTypeRow) bizType() (courier.BizType, error) {
	b := courier.BizType{
		Name: r.Name, Delivery: r.Delivery, CallbackURL: r.CallbackURL, Topic: r.Topic,
		RequestTimeout: time.Duration(r.RequestTimeout) * time.Millisecond,
		RetryInitial:   time.Duration(r.RetryInitial) * time.Millisecond,
		RetryBackoff:   r.RetryBackoff,
		RetryMax:       time.Duration(r.RetryMax) * time.Millisecond,
		MaxAttempts:    r.MaxAttempts, RateLimit: r.RateLimit, AllowPrivate: r.AllowPrivate,
		InsertRate: r.InsertRate, InsertBurst: r.InsertBurst,
		TimerMode: courier.TimerMode(r.TimerMode), TimerRetention: time.Duration(r.TimerRetention) * time.Millisecond,
		FailureURL: r.FailureURL, FailureTopic: r.FailureTopic,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
	b = b.WithDefaults() // rows written before a setting existed
	return b, json.Unmarshal([]byte(r.Secrets), &b.Secrets)
}

// PutBizType creates or replaces a business type (after WithDefaults and Validate) and reports
// whether it was created. An http type put without secrets keeps the signing secrets stored,
// read and rewritten in the same transaction: a PUT must not rotate the signing secret behind
// the receiver's back. With none stored it fails validation on the secrets field.
func (s *Store) PutBizType(ctx context.Context, b courier.BizType) (courier.BizType, bool, error) {
	b = b.WithDefaults()
	keepSecrets := b.Delivery == courier.DeliveryHTTP && len(b.Secrets) == 0
	if !keepSecrets {
		if err := b.Validate(); err != nil {
			return courier.BizType{}, false, err
		}
	}
	var created bool
	var out courier.BizType
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if keepSecrets {
			var stored bizTypeRow
			sel := tx.NewSelect().Model(&stored).Where("name = ?", b.Name)
			if s.pg {
				sel = sel.For("UPDATE")
			}
			err := sel.Scan(ctx)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err == nil {
				kept, err := stored.bizType()
				if err != nil {
					return err
				}
				b.Secrets = kept.Secrets
			}
			if err := b.Validate(); err != nil {
				return err
			}
		}
		secrets, err := json.Marshal(b.Secrets)
		if err != nil {
			return err
		}
		if b.Secrets == nil {
			secrets = []byte("[]")
		}
		row := bizTypeRow{
			Name: b.Name, Delivery: b.Delivery, CallbackURL: b.CallbackURL, Secrets: string(secrets), Topic: b.Topic,
			RequestTimeout: b.RequestTimeout.Milliseconds(), RetryInitial: b.RetryInitial.Milliseconds(),
			RetryBackoff: b.RetryBackoff, RetryMax: b.RetryMax.Milliseconds(), MaxAttempts: b.MaxAttempts,
			RateLimit: b.RateLimit, AllowPrivate: b.AllowPrivate, InsertRate: b.InsertRate, InsertBurst: b.InsertBurst,
			TimerMode: string(b.TimerMode), TimerRetention: b.TimerRetention.Milliseconds(),
			FailureURL: b.FailureURL, FailureTopic: b.FailureTopic,
		}
		n, err := tx.NewSelect().Model((*bizTypeRow)(nil)).Where("name = ?", b.Name).Count(ctx)
		if err != nil {
			return err
		}
		created = n == 0
		if created {
			_, err = tx.NewInsert().Model(&row).ExcludeColumn("created_at", "updated_at").Exec(ctx)
		} else {
			_, err = tx.NewUpdate().Model(&row).ExcludeColumn("created_at", "updated_at").
				Set("updated_at = " + s.nowSQL()).WherePK().Exec(ctx)
		}
		if err != nil {
			return err
		}
		var stored bizTypeRow
		if err := tx.NewSelect().Model(&stored).Where("name = ?", b.Name).Scan(ctx); err != nil {
			return err
		}
		if out, err = stored.bizType(); err != nil {
			return err
		}
		return s.notifyBizType(ctx, tx, b.Name)
	})
	s.bizTypesChanged()
	return out, created, err
}

// GetBizType returns one business type, or not_found.
func (s *Store) GetBizType(ctx context.Context, name string) (courier.BizType, error) {
	var row bizTypeRow
	err := s.db.NewSelect().Model(&row).Where("name = ?", name).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.BizType{}, courier.Errorf(courier.CodeNotFound, "business type %q not found", name)
	}
	if err != nil {
		return courier.BizType{}, err
	}
	return row.bizType()
}

// ListBizTypes returns every business type by name.
func (s *Store) ListBizTypes(ctx context.Context) ([]courier.BizType, error) {
	var rows []bizTypeRow
	if err := s.db.NewSelect().Model(&rows).Order("name ASC").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]courier.BizType, 0, len(rows))
	for i := range rows {
		b, err := rows[i].bizType()
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// DeleteBizType removes a business type, or returns not_found.
func (s *Store) DeleteBizType(ctx context.Context, name string) error {
	var n int64
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewDelete().Model((*bizTypeRow)(nil)).Where("name = ?", name).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ = res.RowsAffected(); n == 0 {
			return nil
		}
		return s.notifyBizType(ctx, tx, name)
	})
	s.bizTypesChanged()
	if err != nil {
		return err
	}
	if n == 0 {
		return courier.Errorf(courier.CodeNotFound, "business type %q not found", name)
	}
	return nil
}

// notifyBizType announces a change of a business type to the BizTypeCaches of other processes
// (PostgreSQL delivers it at commit; SQLite has no other processes to tell).
func (s *Store) notifyBizType(ctx context.Context, tx bun.Tx, name string) error {
	if !s.pg {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SELECT pg_notify('"+bizTypesChannel+"', ?)", name)
	return err
}

// watchBizTypes calls f after every change of a business type made through this Store, until
// unwatch is called.
func (s *Store) watchBizTypes(f func()) (unwatch func()) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.bizTypeWatchers == nil {
		s.bizTypeWatchers = map[int]func(){}
	}
	id := s.nextWatcher
	s.nextWatcher++
	s.bizTypeWatchers[id] = f
	return func() {
		s.watchMu.Lock()
		defer s.watchMu.Unlock()
		delete(s.bizTypeWatchers, id)
	}
}

// bizTypesChanged tells the watchers. It runs after the transaction, whatever its outcome: an
// invalidation too many costs one read.
func (s *Store) bizTypesChanged() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for _, f := range s.bizTypeWatchers {
		f()
	}
}
