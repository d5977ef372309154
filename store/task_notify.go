package store

import (
	"context"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// Claimers of other processes hear of claimable tasks through TasksChannel. A NOTIFY inside a
// writing transaction makes PostgreSQL take one global lock from its commit until its WAL is
// flushed, so every transaction that notifies commits after the one before it: measured on the
// 2-core development machine, inserts that notified reached 241 a second with 8 clients, 1,275
// without (pgbench, docs/benchmarks.md). The hot statements (inserts, retries, recorded
// successes, released slot holds) therefore notify after their commit, and the notifications of
// a moment are coalesced: one statement, one notification per queue, sent while no other is
// under way. A process that dies between a commit and its notification leaves the other
// claimers to their poll (tasks.Config.PollInterval); the claimers of this process are woken
// directly by the task service.

// tasksNotifier sends the coalesced notifications of one Store.
type tasksNotifier struct {
	mu      sync.Mutex
	pending map[string]struct{} // queues to notify
	sending bool                // a sender goroutine runs; it takes pending until it is empty
}

// notifyTimeout bounds one coalesced notification: the database away, it is dropped (the
// claimers' poll finds the tasks).
const notifyTimeout = 5 * time.Second

// notifyCommitted wakes the claimers listening on PostgreSQL for queues, after the
// transaction that made their tasks claimable has committed. It returns at once.
func (s *Store) notifyCommitted(queues ...string) {
	if !s.pg || len(queues) == 0 {
		return
	}
	n := &s.notifier
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending == nil {
		n.pending = map[string]struct{}{}
	}
	for _, q := range queues {
		n.pending[q] = struct{}{}
	}
	if !n.sending {
		n.sending = true
		go s.sendNotifications()
	}
}

// sendNotifications sends what is pending, one statement at a time, until nothing is.
func (s *Store) sendNotifications() {
	n := &s.notifier
	for {
		n.mu.Lock()
		if len(n.pending) == 0 {
			n.sending = false
			n.mu.Unlock()
			return
		}
		queues := make([]string, 0, len(n.pending))
		for q := range n.pending {
			queues = append(queues, q)
		}
		clear(n.pending)
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		// Dropped on error (the store closed, the database away): the claimers poll.
		_, _ = s.db.ExecContext(ctx, "SELECT pg_notify('"+TasksChannel+"', q) FROM unnest(ARRAY[?]::text[]) AS q", bun.List(queues))
		cancel()
	}
}
