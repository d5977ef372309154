package relay

import (
	"context"
	"errors"
	"slices"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/tracing"
)

// Rows on outbox.TimerTopic and outbox.TaskTopic are calls to courier's own API, not
// messages: the relay makes the call (arms the timer, inserts the task) instead of starting a
// delivery. What every such row goes through alike is applyRow's; what differs is its kind's.

// rowKind is one kind of API row.
type rowKind struct {
	name    string              // "timer", "task": named in the log
	verb    string              // "arming a timer": what failed, in the log
	enabled func(r *Relay) bool // false: the worker has no API for it, so its rows go dead
	refused []courier.Code      // codes of a refusal no retry changes: the row goes dead
	apply   func(r *Relay, ctx context.Context, src Source, rec courier.OutboxRecord) error
}

// apiRows are the kinds of API rows, by topic.
var apiRows = map[string]rowKind{outbox.TimerTopic: timerRows, outbox.TaskTopic: taskRows}

// badRow is a row the API can never take (a payload that does not decode): it goes dead with
// the message.
type badRow struct{ msg string }

func (e badRow) Error() string { return e.msg }

// errRowLater leaves a row to its lease without a word: it is applied again once the lease
// runs out.
var errRowLater = errors.New("the row is applied after its lease")

// applyRow applies one API row of kind k: it reads the row, joins the producer's trace, and
// applies it through k. The row is then marked sent; a bad row, or one the API refused with
// one of k's refused codes, goes dead with the reason; any other failure (the database or
// Temporal away) leaves it to its lease, after which it is applied again, so a kind's apply
// must be safe to repeat.
func (r *Relay) applyRow(ctx context.Context, src Source, id int64, k rowKind) {
	dead := func(msg string) {
		if _, err := src.Store.MarkOutboxDead(ctx, id, msg); err != nil {
			r.log.WarnContext(ctx, "marking a "+k.name+" row dead failed", "source", src.Name, "id", id, "error", err)
		}
	}
	if !k.enabled(r) {
		dead(k.name + "s are not enabled on this worker")
		return
	}
	rec, err := src.Store.GetOutbox(ctx, id)
	if err != nil {
		return
	}
	ctx, span := traceRow(ctx, src.Name, id, rec.Topic, tracing.FromHeaders(rec.Headers))
	defer span.End()
	err = k.apply(r, ctx, src, rec)
	var bad badRow
	switch {
	case errors.As(err, &bad):
		dead(bad.msg)
	case err != nil && slices.Contains(k.refused, courier.ErrorCode(err)):
		dead(err.Error())
	case errors.Is(err, errRowLater):
	case err != nil:
		r.log.WarnContext(ctx, k.verb+" failed; retrying after the lease", "source", src.Name, "id", id, "error", err)
	default:
		if _, err := src.Store.MarkOutboxSent(ctx, id); err != nil {
			r.log.WarnContext(ctx, "marking a "+k.name+" row sent failed", "source", src.Name, "id", id, "error", err)
		}
	}
}
