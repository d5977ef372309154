package store

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// deadRef is the bun scan target of DeadOutbox: courier.DeadRef with its columns.
type deadRef struct {
	ID    int64  `bun:"id"`
	Topic string `bun:"topic"`
}

// deadScanPage bounds each scan statement of DeadOutbox.
const deadScanPage = 1000

// DeadOutbox returns up to limit dead records matching f in ascending id order, reading ids and
// topics only, a page of at most 1,000 rows per statement. The topic pattern's literal prefix
// narrows the scan in SQL; its wildcards are matched here.
func (s *Store) DeadOutbox(ctx context.Context, f courier.DeadFilter, limit int) ([]courier.DeadRef, error) {
	var out []courier.DeadRef
	prefix := courier.TopicPatternPrefix(f.Topic)
	after := f.AfterID
	for len(out) < limit {
		var page []deadRef
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
				out = append(out, courier.DeadRef(r))
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
	var n int64
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewUpdate().Model((*outboxRow)(nil)).
			Set("status = ?", courier.OutboxPending).
			Set("next_attempt_at = "+s.nowSQL()).
			Where("id IN (?)", bun.List(ids)).
			Where("status = ?", courier.OutboxDead).
			Exec(ctx)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		// The records keys wait on unblock them (ordered mode).
		return unblockRecords(ctx, tx, ids)
	})
	return n, err
}
