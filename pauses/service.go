package pauses

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/courier-oss/courier"
)

// Store keeps the pauses (store.Store).
type Store interface {
	Pause(ctx context.Context, p courier.Pause) (courier.Pause, bool, error)
	Resume(ctx context.Context, kind courier.PauseKind, name string) (courier.Pause, error)
	ListPauses(ctx context.Context) ([]courier.Pause, error)
}

// Service pauses and resumes, and tells the components that hold work back of each change:
// a resume wakes what waits for it at once (timers waiting in their runs, a queue's claimer,
// the relay) instead of at its next look.
type Service struct {
	store Store
	log   *slog.Logger

	mu      sync.Mutex
	changed []func(ctx context.Context, p courier.Pause, paused bool)
}

// NewService builds the service; a nil log logs to slog.Default().
func NewService(st Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: st, log: log}
}

// OnChange registers f, called after every pause (paused true) and resume (false) made through
// this service, once it is stored. f must return promptly; what it fails to do, the workers'
// own refresh does later.
func (s *Service) OnChange(f func(ctx context.Context, p courier.Pause, paused bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changed = append(s.changed, f)
}

// Pause holds p (p.PausedBy says who) and returns the pause in force: created false when it
// was paused already, which changes nothing.
func (s *Service) Pause(ctx context.Context, p courier.Pause) (courier.Pause, bool, error) {
	out, created, err := s.store.Pause(ctx, p)
	if err != nil {
		return courier.Pause{}, false, err
	}
	if created {
		s.log.InfoContext(ctx, "paused", "kind", out.Kind, "name", out.Name, "reason", out.Reason, "paused_by", out.PausedBy)
		s.tell(ctx, out, true)
	}
	return out, created, nil
}

// Resume lifts the pause of kind's name and returns it (not_found when it is not paused).
func (s *Service) Resume(ctx context.Context, kind courier.PauseKind, name string) (courier.Pause, error) {
	out, err := s.store.Resume(ctx, kind, name)
	if err != nil {
		return courier.Pause{}, err
	}
	s.log.InfoContext(ctx, "resumed", "kind", out.Kind, "name", out.Name, "paused_for", time.Since(out.PausedAt).Round(time.Millisecond))
	s.tell(ctx, out, false)
	return out, nil
}

// List returns the pauses in force.
func (s *Service) List(ctx context.Context) ([]courier.Pause, error) {
	return s.store.ListPauses(ctx)
}

func (s *Service) tell(ctx context.Context, p courier.Pause, paused bool) {
	s.mu.Lock()
	fs := slices.Clone(s.changed)
	s.mu.Unlock()
	for _, f := range fs {
		f(ctx, p, paused)
	}
}
