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

// MaxTaskPage bounds one page of a task list; DefaultTaskPage is its size when none is asked.
const (
	MaxTaskPage     = 1000
	DefaultTaskPage = 100
)

// ListTasks returns one page of the versions f selects, newest first (by creation, then task
// id and version, descending), without their payloads and results, which can be large: a list
// is for finding tasks, GetTask for reading one. more says whether another page follows.
func (s *Store) ListTasks(ctx context.Context, f courier.TaskFilter) (tasks []courier.Task, more bool, err error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultTaskPage
	}
	limit = min(limit, MaxTaskPage)
	var rows []taskRow
	q := s.db.NewSelect().Model(&rows).ExcludeColumn("payload", "result").
		OrderExpr("created_at DESC, task_id DESC, version DESC").Limit(int64(limit) + 1)
	if f.Queue != "" {
		q = q.Where("queue = ?", f.Queue)
	}
	if f.Status != "" {
		q = q.Where("status = ?", f.Status)
	}
	if len(f.Statuses) > 0 {
		q = q.Where("status IN (?)", bun.List(f.Statuses))
	}
	if f.Priority != 0 {
		q = q.Where("priority = ?", f.Priority)
	}
	if f.Latest {
		q = q.Where("?TableAlias.version = (SELECT h.max_version FROM courier_task_heads h WHERE h.task_id = ?TableAlias.task_id)")
	}
	if f.ConcurrencyKey != "" {
		q = q.Where("concurrency_key = ?", f.ConcurrencyKey)
	}
	if !f.CreatedAfter.IsZero() {
		q = q.Where("created_at >= ?", s.timeArg(f.CreatedAfter))
	}
	if !f.CreatedBefore.IsZero() {
		q = q.Where("created_at < ?", s.timeArg(f.CreatedBefore))
	}
	if k := f.After; k != nil {
		at := s.timeArg(k.CreatedAt)
		q = q.WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("created_at < ?", at).
				WhereOr("created_at = ? AND task_id < ?", at, k.TaskID).
				WhereOr("created_at = ? AND task_id = ? AND version < ?", at, k.TaskID, k.Version)
		})
	}
	if err := q.Scan(ctx); err != nil {
		return nil, false, err
	}
	more = len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	tasks = make([]courier.Task, 0, len(rows))
	for i := range rows {
		t, err := rows[i].task()
		if err != nil {
			return nil, false, err
		}
		t.Payload = nil // left out of the page
		tasks = append(tasks, t)
	}
	return tasks, more, nil
}
