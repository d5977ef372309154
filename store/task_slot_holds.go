package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	"github.com/uptrace/bun"
)

// ReleaseSlotHolds gives back the slots held under the given hold ids (FinishReported), once
// the workers their results came from have been answered, and wakes the claimers of their
// queues (at commit). A hold already released (by the grace, ReleaseStaleSlotHolds) is passed
// over. It returns how many slots it released.
func (s *Store) ReleaseSlotHolds(ctx context.Context, holds ...string) (int, error) {
	if len(holds) == 0 {
		return 0, nil
	}
	return s.releaseHolds(ctx, "hold_id IN (?)", bun.List(holds))
}

// ReleaseStaleSlotHolds gives back the slots held longer than olderThan: their gateway died
// between recording results and answering them (or could not reach the database to release
// them), and no answer will come. Any claimer may run it; it returns how many slots it
// released.
func (s *Store) ReleaseStaleSlotHolds(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.releaseHolds(ctx, "held_at < "+s.nowPlusSQL(-olderThan))
}

// releaseHolds deletes the holds cond selects and lowers their queues' in_flight by the slots
// they held, in one transaction, queue by queue in name order (two releases never wait on each
// other's queues in opposite orders), and wakes their claimers after the commit.
func (s *Store) releaseHolds(ctx context.Context, cond string, args ...any) (int, error) {
	released := 0
	var queues []string
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		released, queues = 0, nil
		var holds []struct {
			Queue string `bun:"queue"`
			Slots int    `bun:"slots"`
		}
		err := tx.NewRaw("DELETE FROM courier_task_slot_holds WHERE "+cond+" RETURNING queue, slots", args...).Scan(ctx, &holds)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		byQueue := map[string]int{}
		for _, h := range holds {
			byQueue[h.Queue] += h.Slots
		}
		for q := range byQueue {
			queues = append(queues, q)
		}
		slices.Sort(queues)
		const upd = "UPDATE courier_task_queues SET in_flight = in_flight - ? WHERE name = ?"
		for _, q := range queues {
			if _, err := tx.ExecContext(ctx, upd, byQueue[q], q); err != nil {
				return err
			}
			released += byQueue[q]
		}
		return nil
	})
	if err == nil {
		s.notifyCommitted(queues...)
	}
	return released, err
}
