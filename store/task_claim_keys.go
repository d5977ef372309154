package store

import (
	"context"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/dispatch"
)

// keysInFlight counts a keyed queue's tasks in Processing by key: at most its concurrency
// limit of rows, read through the (queue, status) index. Derived from the rows in the claim's
// transaction (which holds the queue's limiter row, so no other claim changes them meanwhile),
// the per-key counts can never drift.
func (s *Store) keysInFlight(ctx context.Context, tx bun.Tx, queue string) (map[string]int, error) {
	var rows []struct {
		Key string `bun:"concurrency_key"`
		N   int    `bun:"n"`
	}
	if err := tx.NewRaw("SELECT concurrency_key, count(*) AS n FROM courier_tasks WHERE queue = ? AND status = 'processing' GROUP BY concurrency_key",
		queue).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	inFlight := make(map[string]int, len(rows))
	for _, r := range rows {
		inFlight[r.Key] = r.N
	}
	return inFlight, nil
}

// keyCandidateRow is a ready task of a keyed queue's band as keyCandidates reads it.
type keyCandidateRow struct {
	TaskID    string    `bun:"task_id"`
	Version   int64     `bun:"version"`
	Key       string    `bun:"concurrency_key"`
	CreatedAt time.Time `bun:"created_at"`
}

// keyCandidates reads the first n ready tasks of each key with pending tasks in a band (no key
// can take more of the band's share), grouped by key, each key's in claim order (higher
// version, then oldest). The keys are found by a loose scan of courier_tasks_key_ready_idx (one
// index seek per key, rather than a read of every pending row: a key with 100,000 tasks costs
// what a key with one does), and each key's first n by a bounded read of the same index.
func (s *Store) keyCandidates(ctx context.Context, tx bun.Tx, queue string, band, n int) ([]dispatch.KeyCandidate, error) {
	pending := "FROM courier_tasks WHERE queue = ? AND status = 'pending' AND priority = ?"
	keys := "WITH RECURSIVE keys(k) AS (SELECT (SELECT concurrency_key " + pending + " ORDER BY concurrency_key LIMIT 1) " +
		"UNION ALL SELECT (SELECT concurrency_key " + pending + " AND concurrency_key > keys.k ORDER BY concurrency_key LIMIT 1) " +
		"FROM keys WHERE keys.k IS NOT NULL) "
	first := "SELECT task_id, version, concurrency_key, created_at " + pending + " AND concurrency_key = keys.k AND next_attempt_at <= " +
		s.nowSQL() + s.notExpiredSQL() + " ORDER BY version DESC, created_at ASC, task_id ASC LIMIT ?"
	var query string
	if s.pg {
		query = keys + "SELECT c.* FROM keys CROSS JOIN LATERAL (" + first + ") AS c WHERE keys.k IS NOT NULL"
	} else {
		query = keys + "SELECT task_id, version, concurrency_key, created_at FROM courier_tasks WHERE rowid IN (SELECT t.rowid FROM keys, courier_tasks t " +
			"WHERE keys.k IS NOT NULL AND t.rowid IN (" + strings.Replace(first, "SELECT task_id, version, concurrency_key, created_at", "SELECT rowid", 1) + "))"
	}
	query += " ORDER BY concurrency_key, version DESC, created_at ASC, task_id ASC"
	var rows []keyCandidateRow
	if err := tx.NewRaw(query, queue, band, queue, band, queue, band, n).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	cands := make([]dispatch.KeyCandidate, len(rows))
	for i, r := range rows {
		cands[i] = dispatch.KeyCandidate{TaskID: r.TaskID, Version: r.Version, Key: r.Key, CreatedAt: r.CreatedAt}
	}
	return cands, nil
}

// claimPicked moves the picked tasks of a keyed queue's band that are still pending to
// Processing.
func (s *Store) claimPicked(ctx context.Context, tx bun.Tx, picked []dispatch.KeyCandidate, batch string, at time.Time) ([]taskRow, error) {
	if len(picked) == 0 {
		return nil, nil
	}
	// Picked like an unkeyed band's tasks: a row another transaction holds (a replace, a
	// cancel) is skipped on PostgreSQL rather than waited for with the limiter row locked.
	var sub strings.Builder
	args := make([]any, 0, 2*len(picked))
	sub.WriteString("SELECT task_id, version FROM courier_tasks WHERE (task_id, version) IN (")
	for i, c := range picked {
		if i > 0 {
			sub.WriteString(", ")
		}
		sub.WriteString("(?, ?)")
		args = append(args, c.TaskID, c.Version)
	}
	sub.WriteString(")")
	with, in := s.picked(sub.String())
	return s.markClaimed(ctx, tx, batch, at, with, in, args...)
}
