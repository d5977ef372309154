package tasks

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tracing"
)

// ReportMany records many workers' results at once (POST /v1/tasks/results), each as Report
// would and answered on its own: errs[i] is nil for a result recorded, or the error Report
// would have answered (a malformed result, an attempt not running or already ended, a task
// that does not exist). The results are written in one transaction, the successes in one
// statement, and the slots they free are held under one hold until the caller calls release,
// once it has written its answer. A result of an attempt with a run of its own is handed to
// that run after the answer, as Report does. err is set when nothing could be recorded (the
// database away): the caller answers it for every result, and the worker sends them again.
func (s *Service) ReportMany(ctx context.Context, results []api.TaskResultItem) (errs []error, release func(), err error) {
	release = func() {}
	errs = make([]error, len(results))
	var (
		writes []store.ReportedResult
		at     []int // writes[j] is results[at[j]]
	)
	trace := tracing.FromContext(ctx)
	for i, item := range results {
		r := item.TaskResult
		if e := checkResult(r); e != nil {
			errs[i] = e
			continue
		}
		if e := courier.CheckID("task_id", item.TaskID); e != nil {
			errs[i] = e
			continue
		}
		if item.TaskVersion < 1 {
			errs[i] = validation("task_version", "task_version must be an integer of at least 1")
			continue
		}
		writes = append(writes, store.ReportedResult{TaskID: item.TaskID, Version: item.TaskVersion, Attempt: item.Attempt, Outcome: outcomeOf(r, trace)})
		at = append(at, i)
	}
	if len(writes) == 0 {
		return errs, release, nil
	}
	hold := newHoldID()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReportTimeout)
	defer cancel()
	frs, err := s.store.FinishReportedMany(wctx, writes, hold)
	if err != nil {
		s.log.WarnContext(ctx, "record task results", "results", len(writes), "error", err)
		return errs, release, unavailable("the results could not be recorded; send them again")
	}
	release = s.releaser(ctx, hold)
	var handOvers []handOverItem
	for j, fr := range frs {
		i, w := at[j], writes[j]
		if !fr.Applied {
			errs[i] = notApplied(w, fr)
			continue
		}
		if s.metrics != nil {
			s.metrics.Results.WithLabelValues(fr.Queue, string(w.Outcome.Kind)).Inc()
			if fr.PushedAt != nil {
				s.metrics.PushToResult.WithLabelValues(fr.Queue).Observe(time.Since(*fr.PushedAt).Seconds())
			}
		}
		tracing.Link(ctx, fr.Trace, linkToTask)
		if fr.Batch == "" && fr.Run.ID != "" {
			o := w.Outcome
			o.Recorded = true
			handOvers = append(handOvers, handOverItem{
				task: courier.Task{TaskID: w.TaskID, Version: w.Version, RunID: fr.Run.ID, AttemptHeartbeatTimeout: fr.Run.HeartbeatTimeout},
				res:  contract.AttemptResult{Attempt: w.Attempt, Outcome: o, Status: fr.Status}})
		}
	}
	if len(handOvers) > 0 {
		go s.handOverAll(context.WithoutCancel(ctx), handOvers)
	}
	return errs, release, nil
}

// handOverItem is a recorded result to hand to its attempt's run.
type handOverItem struct {
	task courier.Task
	res  contract.AttemptResult
}

// handOverAll hands recorded results to their attempts' runs, after the answer, a few at once.
func (s *Service) handOverAll(ctx context.Context, items []handOverItem) {
	sem := make(chan struct{}, bulkParallel)
	for _, it := range items {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			hctx, cancel := context.WithTimeout(ctx, HandOverTimeout)
			defer cancel()
			if err := s.handOver(hctx, it.task, it.res); err != nil {
				s.log.WarnContext(hctx, "hand a recorded task result to its run (the run ends by its deadline)",
					"task_id", it.task.TaskID, "version", it.task.Version, "attempt", it.res.Attempt, "error", err)
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
}

// notApplied is the answer to a result the row did not take, as Report would give it.
func notApplied(w store.ReportedResult, fr store.FinishResult) error {
	if fr.Status == "" {
		return &courier.Error{Code: courier.CodeNotFound, Message: fmt.Sprintf("task %q version %d not found", w.TaskID, w.Version)}
	}
	return &courier.Error{Code: courier.CodeConflict,
		Message: fmt.Sprintf("attempt %d of task %q version %d is no longer running (task is %s)", w.Attempt, w.TaskID, w.Version, fr.Status),
		Details: map[string]any{"status": string(fr.Status)}}
}
