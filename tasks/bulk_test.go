package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/store"
)

// racingStore is the real store, except that the cancels and retries of the task ids in
// changed find them changed meanwhile (a conflict), and those in broken fail.
type racingStore struct {
	*store.Store
	mu      sync.Mutex
	changed map[string]bool
	broken  map[string]bool
	acted   int
}

func (s *racingStore) refuse(taskID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acted++
	switch {
	case s.changed[taskID]:
		return &courier.Error{Code: courier.CodeConflict, Message: "finished meanwhile"}
	case s.broken[taskID]:
		return errors.New("database is down")
	}
	return nil
}

func (s *racingStore) CancelTask(ctx context.Context, taskID string, version int64) (courier.Task, bool, error) {
	if err := s.refuse(taskID); err != nil {
		return courier.Task{}, false, err
	}
	return s.Store.CancelTask(ctx, taskID, version)
}

func (s *racingStore) RetryTask(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	if err := s.refuse(taskID); err != nil {
		return courier.Task{}, err
	}
	return s.Store.RetryTask(ctx, taskID, version)
}

// A bulk action reads page after page (500 a statement) up to its cap, counts what it did and
// what had changed meanwhile, says whether more match, and stops at an error other than a
// conflict with what it did kept.
func TestBulkPagesCapAndSkips(t *testing.T) {
	st, _ := testenv.Store(t, "sqlite")
	ctx := t.Context()
	_, _, err := st.PutQueue(ctx, courier.Queue{Name: "q"}.WithDefaults())
	require.NoError(t, err)
	const n = 1203
	for i := range n {
		_, _, err := st.InsertTask(ctx, courier.TaskRequest{TaskID: fmt.Sprintf("t-%04d", i), Version: 1, Queue: "q"})
		require.NoError(t, err)
	}
	rs := &racingStore{Store: st, changed: map[string]bool{"t-1202": true, "t-0001": true}, broken: map[string]bool{}}
	var woken int
	s := NewService(rs, nil, "default", func() { woken++ }, nil, slog.New(slog.DiscardHandler))
	f := courier.TaskFilter{Queue: "q"}

	res, err := s.CancelMatching(ctx, f, 1100)
	require.NoError(t, err)
	require.Equal(t, courier.TaskBulkResult{Affected: 1099, Skipped: 1, More: true}, res, "t-1202 (the newest) had changed")
	res, err = s.CancelMatching(ctx, f, 1100)
	require.NoError(t, err)
	require.Equal(t, courier.TaskBulkResult{Affected: 102, Skipped: 2}, res,
		"the rest, and the two that changed are matched again (they are still pending here)")
	left, _, err := st.ListTasks(ctx, courier.TaskFilter{Queue: "q", Status: courier.TaskPending})
	require.NoError(t, err)
	require.Len(t, left, 2)

	_, err = s.CancelMatching(ctx, f, 0)
	require.Equal(t, courier.CodeValidation, courier.ErrorCode(err))
	_, err = s.CancelMatching(ctx, f, MaxBulkMax+1)
	require.Equal(t, courier.CodeValidation, courier.ErrorCode(err))
	_, err = s.CancelMatching(ctx, courier.TaskFilter{Status: courier.TaskFailed}, 10)
	require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), "a cancel applies to pending and processing tasks only")
	_, err = s.RetryMatching(ctx, courier.TaskFilter{Status: courier.TaskPending}, 10)
	require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), "a retry applies to failed and cancelled tasks only")

	// A failure other than a conflict stops the action; what was done stays done.
	rs.mu.Lock()
	rs.broken["t-0500"] = true
	rs.acted = 0
	rs.mu.Unlock()
	woken = 0
	res, err = s.RetryMatching(ctx, courier.TaskFilter{Queue: "q", Status: courier.TaskCancelled}, MaxBulkMax)
	require.Error(t, err)
	require.Less(t, rs.acted, n-2, "the action stopped")
	require.Positive(t, res.Affected)
	var pending int
	require.NoError(t, st.DB().NewRaw("SELECT count(*) FROM courier_tasks WHERE queue = 'q' AND status = 'pending'").Scan(ctx, &pending))
	require.Equal(t, 2+res.Affected, pending, "the retried tasks are pending")
	require.Positive(t, woken, "the claimers are woken")
}
