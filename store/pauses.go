package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// PausesChannel is the PostgreSQL channel every pause and resume is announced on, at its
// commit (the payload is the kind), so workers see it at once rather than at their next read.
const PausesChannel = "courier_pauses"

type pauseRow struct {
	bun.BaseModel `bun:"table:courier_pauses"`

	Kind     string    `bun:"kind,pk"`
	Name     string    `bun:"name,pk"`
	Reason   string    `bun:"reason"`
	PausedBy string    `bun:"paused_by"`
	PausedAt time.Time `bun:"paused_at"`
}

func (r pauseRow) pause() courier.Pause {
	return courier.Pause{Kind: courier.PauseKind(r.Kind), Name: r.Name, Reason: r.Reason, PausedBy: r.PausedBy, PausedAt: r.PausedAt.UTC()}
}

// Pause holds p.Kind's p.Name (after courier.CheckPause) and returns the pause in force, with
// created false when it was paused already: a second pause changes nothing, not even the
// reason, so the first operator's words and time stay.
func (s *Store) Pause(ctx context.Context, p courier.Pause) (courier.Pause, bool, error) {
	if err := courier.CheckPause(p.Kind, p.Name, p.Reason); err != nil {
		return courier.Pause{}, false, err
	}
	var out pauseRow
	var created bool
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.ExecContext(ctx, "INSERT INTO courier_pauses (kind, name, reason, paused_by, paused_at) VALUES (?, ?, ?, ?, "+
			s.nowSQL()+") ON CONFLICT (kind, name) DO NOTHING", string(p.Kind), p.Name, p.Reason, p.PausedBy)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		if err := tx.NewSelect().Model(&out).Where("kind = ? AND name = ?", string(p.Kind), p.Name).Scan(ctx); err != nil {
			return err
		}
		if created {
			return s.pausesChanged(ctx, tx, p.Kind)
		}
		return nil
	})
	if err != nil {
		return courier.Pause{}, false, err
	}
	return out.pause(), created, nil
}

// Resume lifts a pause and returns it; not_found when kind's name is not paused.
func (s *Store) Resume(ctx context.Context, kind courier.PauseKind, name string) (courier.Pause, error) {
	if err := courier.CheckPause(kind, name, ""); err != nil {
		return courier.Pause{}, err
	}
	var out pauseRow
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewSelect().Model(&out).Where("kind = ? AND name = ?", string(kind), name).Scan(ctx)
		if errors.Is(err, sql.ErrNoRows) {
			return &courier.Error{Code: courier.CodeNotFound, Message: string(kind) + " " + name + " is not paused",
				Details: map[string]any{"kind": string(kind), "name": name}}
		}
		if err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*pauseRow)(nil)).Where("kind = ? AND name = ?", string(kind), name).Exec(ctx); err != nil {
			return err
		}
		if kind == courier.PauseQueue { // the claimers of every worker claim its tasks again at once
			if err := s.notifyTasks(ctx, tx, name); err != nil {
				return err
			}
		}
		return s.pausesChanged(ctx, tx, kind)
	})
	if err != nil {
		return courier.Pause{}, err
	}
	return out.pause(), nil
}

// ListPauses returns every pause in force, by kind and name.
func (s *Store) ListPauses(ctx context.Context) ([]courier.Pause, error) {
	var rows []pauseRow
	if err := s.db.NewSelect().Model(&rows).Order("kind", "name").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]courier.Pause, len(rows))
	for i, r := range rows {
		out[i] = r.pause()
	}
	return out, nil
}

// ReadPauses returns the pauses in force and how many pauses and resumes were ever committed
// (pauses.Watcher). The count tells a reader of a change that left the list as it was: a pause
// made and lifted between two of its reads, which a task claim may have met in between (it
// reads courier_pauses itself). The count is read first, so it never includes a change the
// list lacks; a change that commits between the two reads shows in the count of the next.
func (s *Store) ReadPauses(ctx context.Context) ([]courier.Pause, int64, error) {
	var changes int64
	if err := s.db.NewRaw("SELECT COALESCE(MAX(changes), 0) FROM courier_pause_changes").Scan(ctx, &changes); err != nil {
		return nil, 0, err
	}
	list, err := s.ListPauses(ctx)
	if err != nil {
		return nil, 0, err
	}
	return list, changes, nil
}

// pausesChanged counts a pause or resume in courier_pause_changes and announces it to the
// workers of other processes, both in tx (PostgreSQL delivers the announcement at commit; on
// SQLite they read the table at their next refresh).
func (s *Store) pausesChanged(ctx context.Context, tx bun.Tx, kind courier.PauseKind) error {
	if _, err := tx.ExecContext(ctx, "INSERT INTO courier_pause_changes (id, changes) VALUES (1, 1) "+
		"ON CONFLICT (id) DO UPDATE SET changes = courier_pause_changes.changes + 1"); err != nil {
		return err
	}
	if !s.pg {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SELECT pg_notify('"+PausesChannel+"', ?)", string(kind))
	return err
}
