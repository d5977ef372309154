package pglisten

import (
	"context"
	"log/slog"
	"time"

	"github.com/lib/pq"
)

// Listen forwards PostgreSQL notifications on channel to notify (without blocking: one
// pending nudge is enough). lib/pq's
// listener reconnects by itself; a reconnect also nudges, since notifications sent while
// disconnected are lost.
func Listen(ctx context.Context, dsn, channel string, notify chan<- struct{}, log *slog.Logger) (stop func()) {
	nudge := func() {
		select {
		case notify <- struct{}{}:
		default:
		}
	}
	l := pq.NewListener(dsn, 200*time.Millisecond, 10*time.Second, func(ev pq.ListenerEventType, err error) {
		if err != nil {
			log.Debug("listener", "channel", channel, "event", ev, "error", err)
		}
		if ev == pq.ListenerEventReconnected {
			nudge()
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
			nudge()
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
				nudge()
			}
		}
	}()
	return func() {
		l.Close()
		<-done
	}
}
