package tasks

import (
	"time"

	"github.com/courier-oss/courier/internal/defaults"
)

// Config tunes prioritized tasks on a worker: its claimer, its sweeper schedule and the slots of
// the task activities' own task queues. Zero fields take the defaults below; courier's flags
// take theirs from here.
type Config struct {
	// PublicURL is the gateway's base URL as task workers reach it, for the result and heartbeat
	// links in every push, such as http://127.0.0.1:8080. Required for tasks to run.
	PublicURL string
	// PollInterval is the claimer's fallback poll when no notification wakes it; default
	// DefaultPollInterval.
	PollInterval time.Duration
	// BatchSize is how many tasks one claim transaction takes; default DefaultBatchSize.
	BatchSize int
	// BatchedClaimSize is how many tasks one claim of a queue in the batched dispatch mode
	// takes, the most one batch run pushes; default DefaultBatchedClaimSize.
	BatchedClaimSize int
	// StartWorkers is how many attempt workflows one claim starts at once; default
	// DefaultStartWorkers.
	StartWorkers int
	// RecoverAfter is how long a claimed task may wait for its push before its workflow is
	// started again (a claimer crashed between claim and start); default DefaultRecoverAfter.
	RecoverAfter time.Duration
	// SweepEvery is the sweeper schedule's interval; default DefaultSweepEvery.
	SweepEvery time.Duration
	// PushSlots bounds the pushes one worker process runs at once on the push task queue
	// (courier.TaskPushQueue), and as many local pushes; default DefaultPushSlots. A push holds
	// its slot until the worker answers or its queue's push_timeout passes, so an endpoint that
	// never answers holds at most its queue's concurrency_limit of these slots and none of any
	// other kind.
	PushSlots int
	// FinishSlots bounds the sweeps one worker process runs at once on the finish task queue
	// (courier.TaskFinishQueue); default DefaultFinishSlots.
	FinishSlots int
	// DisableClaimer runs the task workflows and activities without claiming (for tests).
	DisableClaimer bool
}

// Defaults of Config, applied to its zero fields by WithDefaults.
const (
	// DefaultPollInterval is the fallback claim poll when no notification wakes the claimer.
	DefaultPollInterval = time.Second
	// DefaultBatchSize is how many tasks one claim transaction takes.
	DefaultBatchSize = 100
	// DefaultBatchedClaimSize is how many tasks one claim of a batched queue takes.
	DefaultBatchedClaimSize = 500
	// DefaultStartWorkers is how many workflow starts one claim runs at once.
	DefaultStartWorkers = 16
	// DefaultRecoverAfter is how long a claimed task may wait for its push before its workflow
	// is started again.
	DefaultRecoverAfter = 30 * time.Second
	// DefaultSweepEvery is the sweeper schedule's interval (EnsureSweeper).
	DefaultSweepEvery = time.Minute
	// DefaultPushSlots is the task pushes one process runs at once.
	DefaultPushSlots = 200
	// DefaultFinishSlots is the sweeps one process runs at once.
	DefaultFinishSlots = 100
)

// WithDefaults fills c's zero fields with the defaults.
func (c Config) WithDefaults() Config {
	defaults.UnlessPositive(&c.PollInterval, DefaultPollInterval)
	defaults.UnlessPositive(&c.BatchSize, DefaultBatchSize)
	defaults.UnlessPositive(&c.BatchedClaimSize, DefaultBatchedClaimSize)
	defaults.UnlessPositive(&c.StartWorkers, DefaultStartWorkers)
	defaults.UnlessPositive(&c.RecoverAfter, DefaultRecoverAfter)
	defaults.UnlessPositive(&c.SweepEvery, DefaultSweepEvery)
	defaults.UnlessPositive(&c.PushSlots, DefaultPushSlots)
	defaults.UnlessPositive(&c.FinishSlots, DefaultFinishSlots)
	return c
}
