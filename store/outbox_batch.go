package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// The outbox batch mode's statements (docs/outbox.md, "Batch mode"): a batch delivery loads its
// rows in one query, marks the published ones sent in one statement, and hands each row that
// failed to a delivery of its own.

// LoadOutboxBatch returns the records with the given ids, in id order, with their payloads. Ids
// that no longer exist are left out.
func (s *Store) LoadOutboxBatch(ctx context.Context, ids []int64) ([]courier.OutboxRecord, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []outboxRow
	if err := s.db.NewSelect().Model(&rows).Where("id IN (?)", bun.List(ids)).Order("id ASC").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]courier.OutboxRecord, len(rows))
	for i := range rows {
		out[i] = rows[i].record()
	}
	return out, nil
}

// MarkOutboxSentBatch marks the records sent and counts their successful attempt, in one
// statement, and returns how many it marked: records already sent or dead are left alone, so a
// repeated batch is harmless.
func (s *Store) MarkOutboxSentBatch(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := s.db.NewUpdate().Model((*outboxRow)(nil)).
		Set("status = ?", courier.OutboxSent).
		Set("attempts = attempts + 1").
		Set("sent_at = "+s.nowSQL()).
		Where("id IN (?)", bun.List(ids)).
		Where("status IN (?)", bun.List(unsentStatuses)).
		Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// HandOutboxToRecord takes a record out of its batch after a failed attempt: the attempt is
// counted with its error and the record is pending again, due after retryIn. Having an
// attempt, it is never batched again: the relay starts a delivery of its own for it, with the
// per-record retries, dead-lettering and redrive. A record already sent or dead is left alone
// (false).
func (s *Store) HandOutboxToRecord(ctx context.Context, id int64, lastErr string, retryIn time.Duration) (bool, error) {
	return s.updateUnsent(ctx, id, func(q *bun.UpdateQuery) *bun.UpdateQuery {
		return q.Set("status = ?", courier.OutboxPending).
			Set("attempts = attempts + 1").
			Set("last_error = ?", lastErr).
			Set("next_attempt_at = " + s.nowPlusSQL(retryIn))
	})
}
