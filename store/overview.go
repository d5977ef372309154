package store

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/courier-oss/courier"
)

// QueueBacklogs reads every task queue's pending tasks by priority, its oldest pending task, and
// the tasks that reached success or failed since the given time: for the console's overview and
// the backlog metrics. Queues with a configuration but no tasks are listed too, by name.
func (s *Store) QueueBacklogs(ctx context.Context, since time.Time) ([]courier.QueueBacklog, error) {
	var pending []struct {
		Queue    string    `bun:"queue"`
		Priority int       `bun:"priority"`
		N        int64     `bun:"n"`
		Oldest   time.Time `bun:"oldest"`
	}
	if err := s.db.NewSelect().TableExpr("courier_tasks").
		ColumnExpr("queue, priority, count(*) AS n, min(created_at) AS oldest").
		Where("status = ?", courier.TaskPending).GroupExpr("queue, priority").
		Scan(ctx, &pending); err != nil {
		return nil, err
	}
	var finished []struct {
		Queue  string `bun:"queue"`
		Status string `bun:"status"`
		N      int64  `bun:"n"`
	}
	if err := s.db.NewSelect().TableExpr("courier_tasks").ColumnExpr("queue, status, count(*) AS n").
		Where("status IN (?, ?)", courier.TaskSuccess, courier.TaskFailed).
		Where("updated_at >= ?", s.timeArg(since)).GroupExpr("queue, status").
		Scan(ctx, &finished); err != nil {
		return nil, err
	}
	var names []string
	if err := s.db.NewSelect().TableExpr("courier_task_queues").Column("name").Scan(ctx, &names); err != nil {
		return nil, err
	}
	byQueue := map[string]*courier.QueueBacklog{}
	get := func(q string) *courier.QueueBacklog {
		b := byQueue[q]
		if b == nil {
			b = &courier.QueueBacklog{Queue: q}
			byQueue[q] = b
		}
		return b
	}
	for _, n := range names {
		get(n)
	}
	for _, p := range pending {
		if p.Priority < 1 || p.Priority > courier.PriorityBands {
			continue // the insert refuses such rows; a hand-written one is not a band
		}
		b := get(p.Queue)
		b.Pending[p.Priority-1] = p.N
		if oldest := p.Oldest.UTC(); b.OldestPending.IsZero() || oldest.Before(b.OldestPending) {
			b.OldestPending = oldest
		}
	}
	for _, f := range finished {
		b := get(f.Queue)
		if courier.TaskStatus(f.Status) == courier.TaskSuccess {
			b.Succeeded = f.N
		} else {
			b.Failed = f.N
		}
	}
	out := make([]courier.QueueBacklog, 0, len(byQueue))
	for _, b := range byQueue {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b courier.QueueBacklog) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}

// OutboxOverview counts the outbox table's rows by status, finds the oldest row not yet sent,
// and lists the topics with dead records, most first, at most topics of them.
func (s *Store) OutboxOverview(ctx context.Context, topics int) (courier.OutboxOverview, error) {
	st, err := s.OutboxStats(ctx)
	if err != nil {
		return courier.OutboxOverview{}, err
	}
	out := courier.OutboxOverview{ByStatus: st.ByStatus}
	if st.OldestUnsent != nil {
		out.OldestUnsent = *st.OldestUnsent
	}
	if topics <= 0 || st.ByStatus[courier.OutboxDead] == 0 {
		return out, nil
	}
	var dead []struct {
		Topic string `bun:"topic"`
		N     int64  `bun:"n"`
	}
	if err := s.db.NewSelect().TableExpr("courier_outbox").ColumnExpr("topic, count(*) AS n").
		Where("status = ?", courier.OutboxDead).GroupExpr("topic").
		OrderExpr("n DESC, topic ASC").Limit(int64(topics)+1).Scan(ctx, &dead); err != nil {
		return out, err
	}
	for i, d := range dead {
		if i == topics {
			out.DeadTopicsMore = true
			break
		}
		out.DeadByTopic = append(out.DeadByTopic, courier.TopicCount{Topic: d.Topic, Count: d.N})
	}
	return out, nil
}
