package courier

import "time"

// QueueBacklog is one task queue's waiting work and recently finished tasks, read from the task
// table when asked: what the console's overview and the backlog metrics show per queue.
type QueueBacklog struct {
	Queue string
	// Pending counts pending tasks by priority (index 0 is priority 1), those waiting for a
	// retry's next_attempt_at included.
	Pending [PriorityBands]int64
	// OldestPending is the creation time of the oldest pending task; zero when none is pending.
	OldestPending time.Time
	// Succeeded and Failed count the tasks that reached success or failed within the window
	// the caller asked about (by their last update).
	Succeeded, Failed int64
}

// PendingTotal is the queue's pending tasks over every band.
func (b QueueBacklog) PendingTotal() int64 {
	var n int64
	for _, v := range b.Pending {
		n += v
	}
	return n
}

// TopicCount is a number of outbox records of one topic.
type TopicCount struct {
	Topic string
	Count int64
}

// OutboxOverview summarises one outbox table: rows by status, the oldest row not yet sent and
// the dead records by topic.
type OutboxOverview struct {
	ByStatus map[OutboxStatus]int64
	// OldestUnsent is the creation time of the oldest pending or dispatched row; zero when none.
	OldestUnsent time.Time
	// DeadByTopic lists topics with dead records, most first, at most as many as asked;
	// DeadTopicsMore says more topics have dead records.
	DeadByTopic    []TopicCount
	DeadTopicsMore bool
}
