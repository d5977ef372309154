package integration

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logCapture is a slog handler that keeps every record's level and message, for tests of
// what courier logs (and how often).
type logCapture struct {
	mu      sync.Mutex
	records []capturedLog
}

type capturedLog struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, capturedLog{level: r.Level, msg: r.Message, attrs: attrs})
	return nil
}

func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCapture) WithGroup(string) slog.Handler      { return c }

// count counts the records at level whose message contains msg.
func (c *logCapture) count(level slog.Level, msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.records {
		if r.level == level && strings.Contains(r.msg, msg) {
			n++
		}
	}
	return n
}

// find returns the first record whose message contains msg.
func (c *logCapture) find(msg string) (capturedLog, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.records {
		if strings.Contains(r.msg, msg) {
			return r, true
		}
	}
	return capturedLog{}, false
}
