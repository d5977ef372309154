package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// SlotHold names the attempt whose freed slot a worker's result holds (FinishReported).
type SlotHold struct {
	TaskID  string
	Version int64
	Attempt int
}

// ReleaseSlotHolds gives back the slots the named results hold, once their workers have been
// answered, and wakes the claimers of their queues (at commit). A hold already released (by
// the grace, ReleaseStaleSlotHolds) is passed over. It returns how many it released.
func (s *Store) ReleaseSlotHolds(ctx context.Context, holds []SlotHold) (int, error) {
	if len(holds) == 0 {
		return 0, nil
	}
	var cond strings.Builder
	args := make([]any, 0, 3*len(holds))
	cond.WriteString("(task_id, version, attempt) IN (")
	for i, h := range holds {
		if i > 0 {
			cond.WriteString(", ")
		}
		cond.WriteString("(?, ?, ?)")
		args = append(args, h.TaskID, h.Version, h.Attempt)
	}
	cond.WriteString(")")
	return s.releaseHolds(ctx, cond.String(), args...)
}

// ReleaseStaleSlotHolds gives back the slots held longer than olderThan: their gateway died
// between recording a result and answering it (or could not reach the database to release it),
// and no answer will come. Any claimer may run it; it returns how many it released.
func (s *Store) ReleaseStaleSlotHolds(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.releaseHolds(ctx, "held_at < "+s.nowPlusSQL(-olderThan))
}

// releaseHolds deletes the holds cond selects and lowers their queues' in_flight by as many,
// in one transaction, queue by queue in name order (two releases never wait on each other's
// queues in opposite orders).
func (s *Store) releaseHolds(ctx context.Context, cond string, args ...any) (int, error) {
	released := 0
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		released = 0
		var queues []string
		err := tx.NewRaw("DELETE FROM courier_task_slot_holds WHERE "+cond+" RETURNING queue", args...).Scan(ctx, &queues)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && len(queues) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
		slices.Sort(queues)
		for i := 0; i < len(queues); {
			j := i
			for j < len(queues) && queues[j] == queues[i] {
				j++
			}
			upd := "UPDATE courier_task_queues SET in_flight = in_flight - ? WHERE name = ?"
			if s.pg {
				upd += " RETURNING pg_notify('courier_tasks', name)"
			}
			if _, err := tx.ExecContext(ctx, upd, j-i, queues[i]); err != nil {
				return err
			}
			i = j
		}
		released = len(queues)
		return nil
	})
	return released, err
}
