package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/lib/pq"
)

// Channels of the PostgreSQL notifications courier sends, for Listen. OutboxChannel is
// notified by the outbox table's trigger whenever a row becomes pending, inserted or redriven
// (schema/outbox), in producers' databases too; TasksChannel by the task statements whenever a queue may have
// claimable tasks, with the queue's name as payload.
const (
	OutboxChannel = "courier_outbox"
	TasksChannel  = "courier_tasks"
)

// Listen calls notify on every PostgreSQL notification on channel, so a polling loop can wake
// at once instead of at its next poll, until stop is called. notify must not block (a
// non-blocking send to a channel of one is enough). It is also called once LISTEN has taken
// effect (or has failed: the caller's poll then does the work), since rows committed before
// were notified to nobody, and after every reconnect, since notifications sent while
// disconnected are lost. The listener has a connection of its own, which lib/pq reconnects by
// itself; a database that does not answer delays only the wake-ups, never the caller.
//
// SQLite has no notifications: there Listen does nothing and returns a stop that does nothing,
// and callers rely on their poll. A nil log logs to slog.Default().
func (s *Store) Listen(ctx context.Context, channel string, notify func(), log *slog.Logger) (stop func()) {
	if !s.pg {
		return func() {}
	}
	if log == nil {
		log = slog.Default()
	}
	l := pq.NewListener(s.url, 200*time.Millisecond, 10*time.Second, func(ev pq.ListenerEventType, err error) {
		if err != nil {
			log.Debug("listener", "channel", channel, "event", ev, "error", err)
		}
		if ev == pq.ListenerEventReconnected {
			notify()
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Listen blocks until the database answers and takes no context; run it here so an
		// unreachable database delays only the wake-ups, never the polling or shutdown.
		listened := make(chan error, 1)
		go func() { listened <- l.Listen(channel) }()
		select {
		case err := <-listened:
			if err != nil {
				log.Warn("LISTEN failed; polling only", "channel", channel, "error", err)
			}
			// Rows committed before LISTEN took effect sent their notifications to nobody:
			// claim once now that later ones will be heard.
			notify()
		case <-ctx.Done():
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-l.Notify:
				if !ok {
					return
				}
				notify()
			}
		}
	}()
	return func() {
		l.Close()
		<-done
	}
}
