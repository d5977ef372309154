package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// DeadFilter chooses dead records for a bulk redrive. A dead record's next_attempt_at is when
// it went dead (MarkOutboxDead sets it).
type DeadFilter struct {
	Topic      string    // a topic pattern (courier.MatchTopic); empty: every topic
	DeadSince  time.Time // zero: no lower bound; inclusive
	DeadBefore time.Time // zero: no upper bound; exclusive
	AfterID    int64     // records with a greater id only
}

// DeadRef names one dead record; the payload stays in the database.
type DeadRef struct {
	ID    int64  `bun:"id"`
	Topic string `bun:"topic"`
}

// deadScanPage bounds each scan statement of DeadOutbox.
const deadScanPage = 1000

// DeadOutbox returns up to limit dead records matching f in ascending id order, reading ids and
// topics only, a page of at most 1,000 rows per statement. The topic pattern's literal prefix
// narrows the scan in SQL; its wildcards are matched here.
func (s *Store) DeadOutbox(ctx context.Context, f DeadFilter, limit int) ([]DeadRef, error) {
	var out []DeadRef
	prefix := courier.TopicPatternPrefix(f.Topic)
	after := f.AfterID
	for len(out) < limit {
		var page []DeadRef
		q := s.db.NewSelect().TableExpr("courier_outbox").Column("id", "topic").
			Where("status = ?", courier.OutboxDead).Where("id > ?", after).
			Order("id ASC").Limit(deadScanPage)
		if prefix != "" {
			q = q.Where("substr(topic, 1, ?) = ?", len(prefix), prefix)
		}
		if !f.DeadSince.IsZero() {
			q = q.Where("next_attempt_at >= ?", f.DeadSince.UTC())
		}
		if !f.DeadBefore.IsZero() {
			q = q.Where("next_attempt_at < ?", f.DeadBefore.UTC())
		}
		if err := q.Scan(ctx, &page); err != nil {
			return nil, err
		}
		for _, r := range page {
			if f.Topic == "" || courier.MatchTopic(f.Topic, r.Topic) {
				out = append(out, r)
				if len(out) == limit {
					break
				}
			}
		}
		if len(page) < deadScanPage {
			break
		}
		after = page[len(page)-1].ID
	}
	return out, nil
}

// RedriveDeadOutbox moves those of ids that are still dead back to pending, due now, in one
// statement, and returns how many it moved. Callers bound len(ids) (the gateway: 500 a batch).
func (s *Store) RedriveDeadOutbox(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := s.db.NewUpdate().Model((*outboxRow)(nil)).
		Set("status = ?", courier.OutboxPending).
		Set("next_attempt_at = "+s.nowSQL()).
		Where("id IN (?)", bun.List(ids)).
		Where("status = ?", courier.OutboxDead).
		Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
