package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

func (s *Store) getTask(ctx context.Context, db bun.IDB, taskID string, version int64, lock bool) (courier.Task, error) {
	var row taskRow
	q := db.NewSelect().Model(&row).Where("task_id = ? AND version = ?", taskID, version)
	if lock && s.pg {
		q = q.For("UPDATE")
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.Task{}, courier.Errorf(courier.CodeNotFound, "task %q version %d not found", taskID, version)
	}
	if err != nil {
		return courier.Task{}, err
	}
	return row.task()
}

// GetTask returns one task version, or not_found.
func (s *Store) GetTask(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	return s.getTask(ctx, s.db, taskID, version, false)
}

// GetLatestTask returns the highest stored version of a task, or not_found. Purges never delete
// the row of the highest version accepted, so this is the latest version.
func (s *Store) GetLatestTask(ctx context.Context, taskID string) (courier.Task, error) {
	var row taskRow
	err := s.db.NewSelect().Model(&row).Where("task_id = ?", taskID).Order("version DESC").Limit(1).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.Task{}, courier.Errorf(courier.CodeNotFound, "task %q not found", taskID)
	}
	if err != nil {
		return courier.Task{}, err
	}
	return row.task()
}

// TaskHead returns the highest version ever accepted for taskID (0 if none).
func (s *Store) TaskHead(ctx context.Context, taskID string) (int64, error) {
	var head int64
	err := s.db.NewRaw("SELECT max_version FROM courier_task_heads WHERE task_id = ?", taskID).Scan(ctx, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return head, err
}
