package store

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// keyTurns is a keyed queue's tasks in Processing by concurrency key, read in the claim's
// transaction (which holds the queue's limiter row, so no other claim changes them meanwhile)
// and kept up to date as the claim takes more.
type keyTurns struct {
	inFlight map[string]int
}

// keysInFlight counts a keyed queue's tasks in Processing by key: at most its concurrency
// limit of rows, read through the (queue, status) index. Derived from the rows in the claim's
// transaction, the per-key counts can never drift.
func (s *Store) keysInFlight(ctx context.Context, tx bun.Tx, q courier.Queue) (*keyTurns, error) {
	var rows []struct {
		Key string `bun:"concurrency_key"`
		N   int    `bun:"n"`
	}
	if err := tx.NewRaw("SELECT concurrency_key, count(*) AS n FROM courier_tasks WHERE queue = ? AND status = 'processing' GROUP BY concurrency_key",
		q.Name).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	k := &keyTurns{inFlight: make(map[string]int, len(rows))}
	for _, r := range rows {
		k.inFlight[r.Key] = r.N
	}
	return k, nil
}

// keyCandidate is a ready task of a keyed queue's band.
type keyCandidate struct {
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
func (s *Store) keyCandidates(ctx context.Context, tx bun.Tx, queue string, band, n int) ([]keyCandidate, error) {
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
	var cands []keyCandidate
	err := tx.NewRaw(query, queue, band, queue, band, queue, band, n).Scan(ctx, &cands)
	return cands, err
}

// claimKeyed moves up to n ready tasks of one band of a keyed queue to Processing, key by key:
// each slot goes to the key with the fewest tasks in Processing for its weight (so every key
// with ready tasks gets its share of the limit, and a key with one task waiting gets the next
// free slot before a key already holding more), the key whose next task has waited longest on
// a tie; a key at the per-key limit gets none (unkeyed tasks, key "", are one group that the
// limit does not cap). Within a key, higher version first, then oldest, as in an unkeyed band.
func (s *Store) claimKeyed(ctx context.Context, tx bun.Tx, q courier.Queue, band, n int, turns *keyTurns) ([]taskRow, error) {
	cands, err := s.keyCandidates(ctx, tx, q.Name, band, n)
	if err != nil {
		return nil, err
	}
	picked := pickTurns(q, cands, n, turns.inFlight)
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
	rows, err := s.markClaimed(ctx, tx, with, in, args...)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		turns.inFlight[r.Key]++
	}
	return rows, nil
}

// keyQueue is one key's ready tasks of a band while pickTurns hands out the slots.
type keyQueue struct {
	key    string
	weight int
	held   int
	next   []keyCandidate
}

// before says whether this key's turn comes before o's: fewer held for its weight
// (held/weight compared without division), then the older next task, then the lower key.
func (k *keyQueue) before(o *keyQueue) bool {
	if l, r := k.held*o.weight, o.held*k.weight; l != r {
		return l < r
	}
	if !k.next[0].CreatedAt.Equal(o.next[0].CreatedAt) {
		return k.next[0].CreatedAt.Before(o.next[0].CreatedAt)
	}
	return k.key < o.key
}

// pickTurns chooses up to n of cands (grouped by key, each key's in claim order) for the slots,
// given the tasks each key has in Processing: slot by slot, to the key with the lowest
// in-flight count for its weight that is under the per-key limit (keyQueue.before). Pure, so
// the turns are tested without a database.
func pickTurns(q courier.Queue, cands []keyCandidate, n int, inFlight map[string]int) []keyCandidate {
	var keys []*keyQueue
	for i := 0; i < len(cands); {
		j := i
		for j < len(cands) && cands[j].Key == cands[i].Key {
			j++
		}
		k := cands[i].Key
		keys = append(keys, &keyQueue{key: k, weight: q.KeyWeight(k), held: inFlight[k], next: slices.Clip(cands[i:j])})
		i = j
	}
	var out []keyCandidate
	for len(out) < n {
		var best *keyQueue
		for _, k := range keys {
			if len(k.next) == 0 || (k.key != "" && q.PerKeyLimit > 0 && k.held >= q.PerKeyLimit) {
				continue
			}
			if best == nil || k.before(best) {
				best = k
			}
		}
		if best == nil {
			break
		}
		out = append(out, best.next[0])
		best.next = best.next[1:]
		best.held++
	}
	return out
}
