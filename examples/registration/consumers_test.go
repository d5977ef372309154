package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/store"
)

// startJetStream runs a real in-process NATS JetStream server for one test.
func startJetStream(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	srv, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return srv.URL(), js
}

// publish sends a registration to both reward topics the way courier does: Nats-Msg-Id for
// the broker's deduplication (suffixed by the topic: one stream holds both) and, unless
// courierID is empty, Courier-Message-Id. It returns each consumer's last stream sequence.
func publish(t *testing.T, js jetstream.JetStream, natsMsgID, courierID string, userID int64) map[string]uint64 {
	t.Helper()
	payload, err := json.Marshal(UserRegistered{UserID: userID, Email: "user@example.com", RegisteredAt: time.Now().UTC()})
	require.NoError(t, err)
	seqs := map[string]uint64{}
	for _, r := range []Reward{CouponReward, PointsReward} {
		msg := nats.NewMsg(r.Topic)
		msg.Data = payload
		if courierID != "" {
			msg.Header.Set(mq.HeaderMessageID, courierID)
		}
		msg.Header.Set(mq.HeaderKey, "ignored-by-consumers")
		ack, err := js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(natsMsgID+"@"+r.Topic))
		require.NoError(t, err)
		require.False(t, ack.Duplicate, "the broker must accept %s: the test is about what it cannot dedupe", natsMsgID)
		seqs[r.Consumer] = ack.Sequence
	}
	return seqs
}

// settled reports whether every named consumer has been delivered everything up to its last
// sequence and has nothing waiting for an ack (including messages naked for redelivery).
func settled(t *testing.T, js jetstream.JetStream, lastSeqs map[string]uint64, consumers ...string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, name := range consumers {
		lastSeq := lastSeqs[name]
		c, err := js.Consumer(ctx, StreamName, name)
		if err != nil {
			return false // not created yet
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || info.Delivered.Stream < lastSeq || info.AckFloor.Stream < lastSeq {
			return false
		}
	}
	return true
}

type processedRow struct{ Consumer, MessageID string }

func processed(t *testing.T, db *bun.DB) []processedRow {
	t.Helper()
	rows, err := db.QueryContext(context.Background(),
		`SELECT consumer, message_id FROM processed_messages ORDER BY consumer, message_id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []processedRow
	for rows.Next() {
		var r processedRow
		require.NoError(t, rows.Scan(&r.Consumer, &r.MessageID))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// syncBuffer is a bytes.Buffer safe for the consumers' concurrent log writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The `consumers` command grants each reward once per user although the same registration
// arrives twice (two Nats-Msg-Ids, so JetStream cannot drop the copy) and a second, distinct
// registration event arrives for the same user.
func TestConsumersGrantEachRewardExactlyOnce(t *testing.T) {
	url, js := startJetStream(t)
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "rewards.db")
	ctx := context.Background()
	_, err := EnsureStream(ctx, js) // the command ensures it too; publishing needs it first
	require.NoError(t, err)

	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"consumers", "--nats", url, "--db", dbURL}, &bytes.Buffer{}, log)
	}()

	publish(t, js, "outbox-1", "registration/1", 1)             // user 1 registered
	publish(t, js, "outbox-1-republished", "registration/1", 1) // the same record again
	publish(t, js, "outbox-2", "registration/2", 1)             // another event for user 1
	publish(t, js, "outbox-3", "registration/3", 2)             // user 2 registered
	last := publish(t, js, "plain-3", "", 3)                    // no Courier-Message-Id: falls back to Nats-Msg-Id (plain-3@<topic>)

	require.Eventually(t, func() bool { return settled(t, js, last, "coupon", "points") },
		10*time.Second, 20*time.Millisecond, "consumers did not process every message")

	st, err := store.Open(ctx, dbURL)
	require.NoError(t, err)
	defer st.Close()
	db := st.DB()

	coupons, err := ListCoupons(ctx, db)
	require.NoError(t, err)
	require.Len(t, coupons, 3, "one coupon per user")
	for i, want := range []struct {
		user int64
		msg  string
	}{{1, "registration/1"}, {2, "registration/3"}, {3, "plain-3@" + TopicCoupons}} {
		require.Equal(t, want.user, coupons[i].UserID)
		require.Equal(t, want.msg, coupons[i].MessageID)
		require.True(t, strings.HasPrefix(coupons[i].Code, "WELCOME-"), coupons[i].Code)
	}
	points, err := ListPoints(ctx, db)
	require.NoError(t, err)
	require.Len(t, points, 3, "one points row per user")
	for i, user := range []int64{1, 2, 3} {
		require.Equal(t, user, points[i].UserID)
		require.Equal(t, PointsAmount, points[i].Amount)
	}

	var want []processedRow
	for _, r := range []Reward{CouponReward, PointsReward} {
		for _, id := range []string{"plain-3@" + r.Topic, "registration/1", "registration/2", "registration/3"} {
			want = append(want, processedRow{r.Consumer, id})
		}
	}
	require.Equal(t, want, processed(t, db), "one processed_messages row per (consumer, message id)")

	// One log line per grant and per skipped message, for each consumer.
	out := logs.String()
	require.Equal(t, 3, strings.Count(out, `msg="granted coupon"`), out)
	require.Equal(t, 3, strings.Count(out, `msg="granted points"`), out)
	require.Equal(t, 2, strings.Count(out, `msg="skipped duplicate message"`), out)
	require.Equal(t, 2, strings.Count(out, `msg="skipped: user already has a`), out)

	// The rewards command prints what was granted.
	var printed bytes.Buffer
	require.NoError(t, run(ctx, []string{"rewards", "--db", dbURL}, &printed, log))
	require.Contains(t, printed.String(), "COUPONS (3)")
	require.Contains(t, printed.String(), "POINTS (3)")
	require.Contains(t, printed.String(), coupons[0].Code)

	// SIGINT/SIGTERM cancel the context: the command returns cleanly.
	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("consumers did not stop")
	}
}

// A handler that fails rolls its transaction back and naks; the broker redelivers the message
// and the reward is granted exactly once, on the second delivery.
func TestConsumerRedeliversAfterFailureAndGrantsOnce(t *testing.T) {
	_, js := startJetStream(t)
	db := openSQLite(t, "rewards.db")
	ctx := context.Background()
	require.NoError(t, SetupRewards(ctx, db))
	_, err := EnsureStream(ctx, js)
	require.NoError(t, err)

	var (
		mu         sync.Mutex
		deliveries []Delivery
		hookCalls  atomic.Int32
	)
	observe := func(d Delivery) {
		mu.Lock()
		defer mu.Unlock()
		deliveries = append(deliveries, d)
	}
	coupon := &Handler{
		DB: db, Reward: CouponReward, Log: quietLogger(), NakDelay: 50 * time.Millisecond, Observe: observe,
		// Runs after the reward row was written inside the transaction; failing the first
		// call must undo that write.
		BeforeCommit: func(ctx context.Context, messageID string) error {
			if hookCalls.Add(1) == 1 {
				return errors.New("injected failure before commit")
			}
			return nil
		},
	}
	points := &Handler{DB: db, Reward: PointsReward, Log: quietLogger(), NakDelay: 50 * time.Millisecond, Observe: observe}
	for _, h := range []*Handler{coupon, points} {
		stopConsumer, err := StartConsumer(ctx, js, h)
		require.NoError(t, err)
		t.Cleanup(stopConsumer)
	}

	last := publish(t, js, "outbox-7", "registration/7", 7)

	require.Eventually(t, func() bool {
		mu.Lock()
		n := len(deliveries)
		mu.Unlock()
		return n == 3 && settled(t, js, last, "coupon", "points")
	}, 10*time.Second, 20*time.Millisecond, "the failed message was not redelivered and processed")

	mu.Lock()
	var couponDeliveries []Delivery
	for _, d := range deliveries {
		if d.Consumer == "coupon" {
			couponDeliveries = append(couponDeliveries, d)
		} else {
			require.Equal(t, Granted, d.Outcome, "points is unaffected by the coupon failure")
			require.Equal(t, uint64(1), d.Attempt)
		}
	}
	mu.Unlock()
	require.Len(t, couponDeliveries, 2)
	require.Equal(t, Retry, couponDeliveries[0].Outcome)
	require.Equal(t, uint64(1), couponDeliveries[0].Attempt)
	require.ErrorContains(t, couponDeliveries[0].Err, "injected failure")
	// The redelivery took the "new message" path again (the hook ran twice), so the first
	// attempt's processed_messages row and coupon were rolled back, not committed.
	require.Equal(t, Granted, couponDeliveries[1].Outcome)
	require.Equal(t, uint64(2), couponDeliveries[1].Attempt, "the broker redelivered the same message")
	require.Equal(t, "registration/7", couponDeliveries[1].MessageID)
	require.Equal(t, int32(2), hookCalls.Load())

	coupons, err := ListCoupons(ctx, db)
	require.NoError(t, err)
	require.Len(t, coupons, 1)
	require.Equal(t, int64(7), coupons[0].UserID)
	pts, err := ListPoints(ctx, db)
	require.NoError(t, err)
	require.Len(t, pts, 1)
	require.Equal(t, []processedRow{{"coupon", "registration/7"}, {"points", "registration/7"}}, processed(t, db))
}

// A payload without a user id can never succeed: it is terminated, not retried forever.
func TestConsumerTerminatesInvalidPayload(t *testing.T) {
	_, js := startJetStream(t)
	db := openSQLite(t, "rewards.db")
	ctx := context.Background()
	require.NoError(t, SetupRewards(ctx, db))
	_, err := EnsureStream(ctx, js)
	require.NoError(t, err)
	got := make(chan Delivery, 4)
	h := &Handler{DB: db, Reward: CouponReward, Log: quietLogger(), Observe: func(d Delivery) { got <- d }}
	stopConsumer, err := StartConsumer(ctx, js, h)
	require.NoError(t, err)
	t.Cleanup(stopConsumer)

	ack, err := js.Publish(ctx, TopicCoupons, []byte(`{"email":"x@example.com"}`), jetstream.WithMsgID("bad-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return settled(t, js, map[string]uint64{"coupon": ack.Sequence}, "coupon") }, 10*time.Second, 20*time.Millisecond)
	var d Delivery
	select {
	case d = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not report the delivery")
	}
	require.Equal(t, Rejected, d.Outcome)
	require.Equal(t, "bad-1", d.MessageID)
	require.Empty(t, processed(t, db))
	require.Len(t, got, 0, "a terminated message is not redelivered")
}
