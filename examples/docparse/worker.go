package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/courier-oss/courier/taskworker"
)

// PushPath is where courier pushes tasks: the queue's push_url.
const PushPath = "/push"

// StatusUnusable is the status code of the failure reported for a payload that is not a
// document (courier keeps it on the task). Successes are reported with 200, and work cut
// short by a shutdown with 503, by the taskworker library.
const StatusUnusable = http.StatusUnprocessableEntity

// Parser is docparse's task handler: the taskworker library verifies the push, heartbeats and
// reports; Parser only reads the document and counts.
type Parser struct {
	ParseTime time.Duration                                    // simulated work per document
	sleep     func(ctx context.Context, d time.Duration) error // the simulated work; tests replace it
}

// NewParser builds a Parser whose "parsing" takes parseTime.
func NewParser(parseTime time.Duration) *Parser {
	return &Parser{ParseTime: parseTime, sleep: sleepCtx}
}

// Handle parses one attempt's document. A payload that is not a document is a failure with
// StatusUnusable at once; otherwise, after the parse time (cut short when ctx ends: the
// attempt timed out, was cancelled, or docparse is stopping), the counts are the result.
func (p *Parser) Handle(ctx context.Context, t *taskworker.Task) (json.RawMessage, error) {
	doc, err := DecodeDocument(t.Payload)
	if err != nil {
		return nil, taskworker.Fail(StatusUnusable, err)
	}
	if err := p.sleep(ctx, p.ParseTime); err != nil { // a real parser would check ctx as it goes
		return nil, err
	}
	sum := Parse(doc)
	t.SetMessage("parsed " + count(sum.Pages, "page") + ", " + count(sum.Words, "word"))
	return json.Marshal(sum)
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// count says "1 page", "2 pages".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
