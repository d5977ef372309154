package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/worker"
)

const workerRoleEnv = "COURIER_IT_WORKER"

// workerTimersEnv set to 1 makes the worker subprocess deliver timers too (business types and
// bucketed timers from its database, callbacks allowed to loopback).
const workerTimersEnv = "COURIER_IT_TIMERS"

// runWorkerProcess is the body of a worker subprocess: the same worker courier runs, connected
// to the test's Temporal server, database and NATS through the environment. It runs until
// killed.
func runWorkerProcess() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "worker process:", err); return 1 }
	tc, err := client.Dial(client.Options{HostPort: os.Getenv("COURIER_IT_TEMPORAL"), Namespace: os.Getenv("COURIER_IT_NAMESPACE")})
	if err != nil {
		return fail(err)
	}
	st, err := store.Open(ctx, os.Getenv("COURIER_IT_DB"))
	if err != nil {
		return fail(err)
	}
	pub, err := natsmq.Dial(os.Getenv("COURIER_IT_NATS"), "crash-worker")
	if err != nil {
		return fail(err)
	}
	deps := worker.Deps{
		Temporal: tc, Publisher: pub, Logger: quiet,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: st}},
	}
	cfg := worker.Config{
		Relay: relay.Config{BatchSize: 50, PollInterval: 50 * time.Millisecond, Lease: 2 * time.Second, Retry: testRetry},
	}
	if os.Getenv(workerOrderedEnv) == "1" {
		cfg.Relay = orderedRelay()
	}
	if os.Getenv(workerTimersEnv) == "1" {
		deps.BizTypes, deps.TimerRows = st, st
		cfg.AllowLoopbackCallbacks, cfg.Namespace = true, os.Getenv("COURIER_IT_NAMESPACE")
	}
	w, err := worker.New(cfg, deps)
	if err != nil {
		return fail(err)
	}
	if err := w.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("worker ready")
	select {}
}

// A worker killed with SIGKILL in the middle of a batch loses nothing: a new worker finishes
// every record, and the consumer sees each id exactly once.
func TestWorkerCrashLosesNothing(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			s.createStream("ORDERS", "orders.>")
			ctx := context.Background()

			const total = 600
			want := map[string]bool{}
			for b := 0; b < total/100; b++ {
				require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					msgs := make([]outbox.Message, 100)
					for i := range msgs {
						msgs[i] = outbox.Message{Topic: "orders.created", Payload: []byte(fmt.Sprintf(`{"b":%d,"i":%d}`, b, i))}
					}
					ids, err := outbox.Enqueue(ctx, tx, msgs...)
					for _, id := range ids {
						want[idString(id)] = true
					}
					return err
				}))
			}

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(),
				workerRoleEnv+"=1",
				"COURIER_IT_TEMPORAL="+s.ts.GetFrontendHostPort(),
				"COURIER_IT_NAMESPACE="+s.ts.GetDefaultNamespace(),
				"COURIER_IT_DB="+s.dsn,
				"COURIER_IT_NATS="+s.nats.URL(),
			)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })

			// Kill it once it is part-way through.
			require.Eventually(t, func() bool {
				return s.countByStatus()[courier.OutboxSent] >= 30
			}, 2*time.Minute, 20*time.Millisecond, "the first worker makes progress")
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			_, _ = cmd.Process.Wait()
			before := s.countByStatus()
			require.Less(t, before[courier.OutboxSent], int64(total), "the kill landed mid-run")
			t.Logf("killed the worker with %d of %d sent (%d dispatched, %d pending)",
				before[courier.OutboxSent], total, before[courier.OutboxDispatched], before[courier.OutboxPending])

			s.startWorker(false)
			require.Eventually(t, func() bool {
				return s.countByStatus()[courier.OutboxSent] == total
			}, 3*time.Minute, 100*time.Millisecond, "the new worker finishes every record")
			got, _ := s.streamIDs("ORDERS")
			require.Len(t, got, total)
			for id, n := range got {
				require.True(t, want[id], "unexpected id %s", id)
				require.Equal(t, 1, n, "id %s seen %d times by the consumer", id, n)
			}
		})
	}
}
