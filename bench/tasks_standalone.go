package bench

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
)

// standaloneActivity is the activity type of the standalone scenario.
const standaloneActivity = "bench-task-standalone"

// StandaloneDynamicConfig is the engine setting the standalone scenario needs: standalone
// activities are in public preview in Temporal 1.32 and off unless a namespace turns them on.
var StandaloneDynamicConfig = map[string]any{"activity.enableStandalone": true}

// taskStandalone is the engine's own job queue doing the tasks' work: one standalone activity
// per task attempt (started by the client, no workflow around it), posting the job to the same
// HTTP worker the other scenarios use, with the worker's MaxConcurrentActivityExecutionSize as
// the limit. The activities are started before the worker polls, as the backlog is built in
// the other scenarios. Temporal's task queue is FIFO, so the "bands" are labels only; there is
// no history to count events in, and Temporal Cloud bills a standalone activity's start and
// each retry (one action per attempt: Cost.Actions counts the attempts each one reports).
func taskStandalone(ctx context.Context, tc client.Client, cfg TasksConfig) (TaskResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	pl := newPushLog(cfg.Tasks)
	hw := newBaseWorker(cfg, pl)
	defer hw.close()

	queue := fmt.Sprintf("bench-task-standalone-%d", time.Now().UnixNano())
	w := sdkworker.New(tc, queue, sdkworker.Options{MaxConcurrentActivityTaskPollers: 8,
		MaxConcurrentActivityExecutionSize: cfg.Limit})
	w.RegisterActivityWithOptions(hw.post, activity.RegisterOptions{Name: standaloneActivity})

	run := time.Now().UnixNano()
	ids := make([]string, cfg.Tasks)
	started := make([]time.Time, cfg.Tasks)
	handles := make([]client.ActivityHandle, cfg.Tasks)
	backlogStart, starting := time.Now(), markCPU(false)
	err := forEach(ctx, cfg.Tasks, taskStartParallelism, func(i int) error {
		j := taskBaseJob{ID: fmt.Sprintf("standalone-%d-%d", run, i), Priority: taskPriority(i)}
		h, err := tc.ExecuteActivity(ctx, client.StartActivityOptions{
			ID: j.ID, TaskQueue: queue, StartToCloseTimeout: 30 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3},
		}, standaloneActivity, j)
		ids[i], started[i], handles[i] = j.ID, time.Now(), h
		return err
	})
	if err != nil {
		return TaskResult{}, fmt.Errorf("start standalone activities (does the server have %v?): %w", StandaloneDynamicConfig, err)
	}
	backlog := time.Since(backlogStart)
	running := markCPU(false)
	if err := w.Start(); err != nil {
		return TaskResult{}, err
	}
	defer w.Stop()
	for _, h := range handles {
		if err := h.Get(ctx, nil); err != nil {
			return TaskResult{}, err
		}
	}
	cpu := running.until(markCPU(false))
	// The server's close times, as for the other scenarios, and the attempts each activity
	// took (a sample, as histories are sampled elsewhere).
	var last time.Time
	var attempts, sampled int
	step := max(1, len(handles)/costSample)
	for i, h := range handles {
		if i%step != 0 && i != len(handles)-1 {
			continue
		}
		d, err := h.Describe(ctx, client.DescribeActivityOptions{})
		if err != nil {
			return TaskResult{}, fmt.Errorf("describe %s: %w", ids[i], err)
		}
		last = later(last, d.CloseTime)
		attempts += int(max(1, d.Attempt))
		sampled++
	}
	lat := make([]time.Duration, 0, cfg.Tasks)
	for i := range cfg.Tasks {
		at, ok := pl.firstPush(ids[i])
		if !ok {
			return TaskResult{}, fmt.Errorf("activity %d completed without a push", i)
		}
		lat = append(lat, at.Sub(started[i]))
		last = later(last, at)
	}
	r := pl.result("bare Temporal: 1 standalone activity, FIFO", cfg, lat, last, backlog)
	r.CPU, r.StartCPU = cpu, starting.until(running).Self
	r.Key = "standalone"
	r.Cost = Cost{Actions: float64(attempts) / float64(sampled), Sampled: sampled}
	return r, nil
}
