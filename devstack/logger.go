package devstack

import (
	"context"
	"log/slog"
	"os"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// serverLogger adapts a *slog.Logger to Temporal's logger interface. The
// server is very chatty at debug and info level, so only records at or above
// level (warnings by default) are forwarded. Stop raises level, because a
// stopping server warns about every poll and dial its own shutdown breaks.
type serverLogger struct {
	l     *slog.Logger
	level *slog.LevelVar
}

var (
	_ log.Logger     = serverLogger{}
	_ log.WithLogger = serverLogger{}
)

func (s serverLogger) emit(level slog.Level, msg string, tags []tag.Tag) {
	ctx := context.Background()
	if level < s.level.Level() || !s.l.Enabled(ctx, level) {
		return
	}
	s.l.LogAttrs(ctx, level, msg, tagAttrs(tags)...)
}

func tagAttrs(tags []tag.Tag) []slog.Attr {
	attrs := make([]slog.Attr, 0, len(tags))
	for _, t := range tags {
		attrs = append(attrs, slog.Any(t.Key(), t.Value()))
	}
	return attrs
}

func (serverLogger) Debug(string, ...tag.Tag) {}
func (serverLogger) Info(string, ...tag.Tag)  {}

func (s serverLogger) Warn(msg string, tags ...tag.Tag)   { s.emit(slog.LevelWarn, msg, tags) }
func (s serverLogger) Error(msg string, tags ...tag.Tag)  { s.emit(slog.LevelError, msg, tags) }
func (s serverLogger) DPanic(msg string, tags ...tag.Tag) { s.emit(slog.LevelError, msg, tags) }

func (s serverLogger) Panic(msg string, tags ...tag.Tag) {
	s.emit(slog.LevelError, msg, tags)
	panic(msg)
}

func (s serverLogger) Fatal(msg string, tags ...tag.Tag) {
	s.emit(slog.LevelError, msg, tags)
	os.Exit(1)
}

// With returns a logger that prepends tags to every record.
func (s serverLogger) With(tags ...tag.Tag) log.Logger {
	if len(tags) == 0 {
		return s
	}
	args := make([]any, 0, len(tags))
	for _, a := range tagAttrs(tags) {
		args = append(args, a)
	}
	return serverLogger{l: s.l.With(args...), level: s.level}
}

// minLevel is a slog.Handler that drops records below a fixed level before
// they reach the wrapped handler. It keeps the Temporal SDK client used during
// setup as quiet as the server.
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(attrs), level: h.level}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), level: h.level}
}
