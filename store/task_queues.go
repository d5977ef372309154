package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// PutQueue creates or replaces a queue's configuration (after WithDefaults and Validate) and
// reports whether it was created. The limiter count is kept. A queue put with nil Secrets keeps
// the signing secrets stored, read and rewritten in the same transaction, so changing a limit
// never turns off push signing by accident; an empty, non-nil Secrets removes them.
func (s *Store) PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error) {
	keepSecrets := q.Secrets == nil
	q = q.WithDefaults()
	if err := q.Validate(); err != nil {
		return courier.Queue{}, false, err
	}
	cfg, err := encodeQueue(q)
	if err != nil {
		return courier.Queue{}, false, err
	}
	var created bool
	var out courier.Queue
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// Insert-if-absent first, so two PUTs creating one queue never collide.
		res, err := tx.NewInsert().Model(&queueRow{Name: q.Name, Config: string(cfg), ConcurrencyLimit: q.ConcurrencyLimit}).
			ExcludeColumn("in_flight", "created_at", "updated_at").On("CONFLICT (name) DO NOTHING").Exec(ctx)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		created = n == 1
		if !created && keepSecrets {
			stored, err := s.getQueue(ctx, tx, q.Name, lockWrite)
			if err != nil {
				return err
			}
			q.Secrets = stored.Secrets
			if cfg, err = encodeQueue(q); err != nil {
				return err
			}
		}
		if !created {
			_, err = tx.NewUpdate().Model((*queueRow)(nil)).Set("config = ?", string(cfg)).
				Set("concurrency_limit = ?", q.ConcurrencyLimit).Set("updated_at = "+s.nowSQL()).
				Where("name = ?", q.Name).Exec(ctx)
		}
		if err != nil {
			return err
		}
		if err := s.notifyTasks(ctx, tx, q.Name); err != nil { // a raised limit frees slots now
			return err
		}
		out, err = s.getQueue(ctx, tx, q.Name, lockNone)
		return err
	})
	return out, created, err
}

// How getQueue locks a queue's row on PostgreSQL (SQLite runs one writer at a time).
const (
	lockNone = ""
	// lockWrite is taken to change the row's counts or configuration: writers wait for each
	// other, and take no lock that makes an insert wait.
	lockWrite = "NO KEY UPDATE"
	// lockKeep is taken by whatever makes a task of the queue pending (an insert, a retry): the
	// queue cannot be deleted under it (DeleteQueue locks FOR UPDATE), and nothing else waits.
	lockKeep = "KEY SHARE"
	// lockDelete is DeleteQueue's: it waits for every lockKeep, so no task becomes pending in
	// a queue being deleted.
	lockDelete = "UPDATE"
)

func (s *Store) getQueue(ctx context.Context, db bun.IDB, name string, lock string) (courier.Queue, error) {
	var row queueRow
	q := db.NewSelect().Model(&row).Where("name = ?", name)
	if lock != lockNone && s.pg {
		q = q.For(lock)
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.Queue{}, courier.Errorf(courier.CodeNotFound, "queue %q not found", name)
	}
	if err != nil {
		return courier.Queue{}, err
	}
	return row.queue()
}

// GetQueue returns one queue with its defaults applied, or not_found.
func (s *Store) GetQueue(ctx context.Context, name string) (courier.Queue, error) {
	return s.getQueue(ctx, s.db, name, lockNone)
}

// ListQueues returns every queue by name.
func (s *Store) ListQueues(ctx context.Context) ([]courier.Queue, error) {
	var rows []queueRow
	if err := s.db.NewSelect().Model(&rows).Order("name ASC").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]courier.Queue, 0, len(rows))
	for i := range rows {
		q, err := rows[i].queue()
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// DeleteQueue deletes a queue that has no unfinished work, with its finished tasks (success,
// failed, stopped, superseded, cancelled; the highest version of every task id is kept
// elsewhere, so a stale request still cannot come back). A queue with pending or processing
// tasks, or slots still held, is a conflict naming the counts: cancel them or let them finish.
// A pause of the queue is by name and stays until resumed.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var row queueRow
		sel := tx.NewSelect().Model(&row).Where("name = ?", name)
		if s.pg {
			sel = sel.For(lockDelete)
		}
		if err := sel.Scan(ctx); errors.Is(err, sql.ErrNoRows) {
			return courier.Errorf(courier.CodeNotFound, "queue %q not found", name)
		} else if err != nil {
			return err
		}
		var counts []struct {
			Status string `bun:"status"`
			N      int64  `bun:"n"`
		}
		if err := tx.NewRaw("SELECT status, count(*) AS n FROM courier_tasks WHERE queue = ? AND status IN ('pending', 'processing') GROUP BY status", name).
			Scan(ctx, &counts); err != nil {
			return err
		}
		details := map[string]any{"pending": int64(0), "processing": int64(0), "in_flight": row.InFlight}
		busy := row.InFlight > 0
		for _, c := range counts {
			details[c.Status] = c.N
			busy = busy || c.N > 0
		}
		if busy {
			return &courier.Error{Code: courier.CodeConflict, Details: details,
				Message: fmt.Sprintf("queue %q still has unfinished tasks (%d pending, %d processing, %d slots in use); cancel them or let them finish first",
					name, details["pending"], details["processing"], row.InFlight)}
		}
		if _, err := tx.NewRaw("DELETE FROM courier_tasks WHERE queue = ?", name).Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewDelete().Model((*queueRow)(nil)).Where("name = ?", name).Exec(ctx)
		return err
	})
}

// TaskStats are task counts for the metrics collector.
type TaskStats struct {
	ByQueueStatus map[string]map[courier.TaskStatus]int64
	InFlight      map[string]int64
	Limit         map[string]int64
}

// TaskStats counts tasks by queue and status, and reads every queue's slots.
func (s *Store) TaskStats(ctx context.Context) (TaskStats, error) {
	st := TaskStats{ByQueueStatus: map[string]map[courier.TaskStatus]int64{}, InFlight: map[string]int64{}, Limit: map[string]int64{}}
	var rows []struct {
		Queue  string `bun:"queue"`
		Status string `bun:"status"`
		N      int64  `bun:"n"`
	}
	if err := s.db.NewRaw("SELECT queue, status, count(*) AS n FROM courier_tasks GROUP BY queue, status").Scan(ctx, &rows); err != nil {
		return st, err
	}
	var queues []queueRow
	if err := s.db.NewSelect().Model(&queues).Scan(ctx); err != nil {
		return st, err
	}
	for _, q := range queues {
		st.ByQueueStatus[q.Name] = map[courier.TaskStatus]int64{}
		st.InFlight[q.Name] = int64(q.InFlight)
		st.Limit[q.Name] = int64(q.ConcurrencyLimit)
	}
	for _, r := range rows {
		if st.ByQueueStatus[r.Queue] == nil {
			st.ByQueueStatus[r.Queue] = map[courier.TaskStatus]int64{}
		}
		st.ByQueueStatus[r.Queue][courier.TaskStatus(r.Status)] = r.N
	}
	return st, nil
}
