package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/courier-oss/courier/mq"
)

// The stream the consumers read, and its settings.
const (
	StreamName = "REGISTRATION"
	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id to drop a re-publish.
	DuplicateWindow = 2 * time.Minute
	// AckWait is how long a delivered, unacknowledged message waits before redelivery.
	AckWait = 30 * time.Second
	// PointsAmount is the welcome bonus.
	PointsAmount = 100
	// DefaultNakDelay is how long a failed message waits before it is redelivered.
	DefaultNakDelay = 2 * time.Second
	// handleTimeout bounds one message's processing; it is below AckWait so a slow database
	// does not make the broker redeliver a message that is still being processed.
	handleTimeout = 20 * time.Second
)

// rewardsDDL creates the consumers' tables, per dialect. processed_messages is the
// idempotency record: its primary key admits each (consumer, message id) once. coupons and
// points admit one row per user.
var rewardsDDL = map[dialect.Name][]string{
	dialect.SQLite: rewardsTables("TEXT"),
	dialect.PG:     rewardsTables("TIMESTAMPTZ"),
}

func rewardsTables(timestamp string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS processed_messages (
    consumer     TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    processed_at ` + timestamp + ` NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (consumer, message_id)
)`,
		`CREATE TABLE IF NOT EXISTS coupons (
    user_id    BIGINT NOT NULL UNIQUE,
    code       TEXT NOT NULL,
    message_id TEXT NOT NULL,
    granted_at ` + timestamp + ` NOT NULL DEFAULT CURRENT_TIMESTAMP
)`,
		`CREATE TABLE IF NOT EXISTS points (
    user_id    BIGINT NOT NULL UNIQUE,
    amount     INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    granted_at ` + timestamp + ` NOT NULL DEFAULT CURRENT_TIMESTAMP
)`,
	}
}

// SetupRewards creates the consumers' tables if they are missing.
func SetupRewards(ctx context.Context, db *bun.DB) error {
	ddl, ok := rewardsDDL[db.Dialect().Name()]
	if !ok {
		return fmt.Errorf("rewards: unsupported dialect %s", db.Dialect().Name())
	}
	for _, q := range ddl {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("rewards: create tables: %w", err)
		}
	}
	return nil
}

// Reward is one consumer of registrations: its durable consumer name (also its name in
// processed_messages and in its RabbitMQ queue's name), the topic it reads, and how it grants
// its reward inside the handler's transaction.
type Reward struct {
	Consumer string
	Topic    string
	// Grant inserts the reward for the user unless one exists and reports whether it did,
	// with a short description for the log.
	Grant func(ctx context.Context, tx bun.Tx, ev UserRegistered, messageID string) (granted bool, detail string, err error)
}

// CouponReward grants a welcome coupon with a random code.
var CouponReward = Reward{Consumer: "coupon", Topic: TopicCoupons, Grant: grantCoupon}

// PointsReward grants PointsAmount points.
var PointsReward = Reward{Consumer: "points", Topic: TopicPoints, Grant: grantPoints}

func grantCoupon(ctx context.Context, tx bun.Tx, ev UserRegistered, messageID string) (bool, string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return false, "", err
	}
	code := "WELCOME-" + hex.EncodeToString(b[:])
	res, err := tx.ExecContext(ctx,
		`INSERT INTO coupons (user_id, code, message_id) VALUES (?, ?, ?) ON CONFLICT (user_id) DO NOTHING`,
		ev.UserID, code, messageID)
	if err != nil {
		return false, "", fmt.Errorf("insert coupon: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, "code=" + code, err
}

func grantPoints(ctx context.Context, tx bun.Tx, ev UserRegistered, messageID string) (bool, string, error) {
	res, err := tx.ExecContext(ctx,
		`INSERT INTO points (user_id, amount, message_id) VALUES (?, ?, ?) ON CONFLICT (user_id) DO NOTHING`,
		ev.UserID, PointsAmount, messageID)
	if err != nil {
		return false, "", fmt.Errorf("insert points: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, "amount=" + strconv.Itoa(PointsAmount), err
}

// Outcome is what the handler did with one delivery.
type Outcome string

// The outcomes of a delivery.
const (
	// Granted: a new message, and the reward was inserted. Acked.
	Granted Outcome = "granted"
	// AlreadyGranted: a new message (e.g. a second registration event for the same user), but
	// the user already had the reward. Recorded and acked; nothing else changes.
	AlreadyGranted Outcome = "already-granted"
	// Duplicate: this consumer processed the message id before. Acked; nothing changes.
	Duplicate Outcome = "duplicate"
	// Retry: processing failed and rolled back; the message is redelivered after a delay.
	Retry Outcome = "retry"
	// Rejected: the payload can never be processed; the message is terminated.
	Rejected Outcome = "rejected"
)

// Delivery reports one handled message.
type Delivery struct {
	Consumer  string
	MessageID string
	UserID    int64
	Attempt   uint64 // the broker's delivery count, 1 for the first delivery
	Outcome   Outcome
	Err       error
}

// Handler processes registration messages for one reward with an exactly-once effect, from
// NATS JetStream (Handle) or RabbitMQ (HandleAMQP).
type Handler struct {
	DB     *bun.DB
	Reward Reward
	Log    *slog.Logger
	// NakDelay is the redelivery delay after a failure; 0 means DefaultNakDelay. (RabbitMQ has
	// no delayed requeue: its consumer waits this long before it requeues.)
	NakDelay time.Duration
	// BeforeCommit, if set, runs inside the transaction after a new message was recorded and
	// the reward granted (or found), just before commit. An error rolls the transaction back
	// and the message is redelivered. Tests use it to inject failures.
	BeforeCommit func(ctx context.Context, messageID string) error
	// Observe, if set, is told about every delivery after it was acked, naked or terminated
	// (requeued or rejected on RabbitMQ).
	Observe func(Delivery)
}

// MessageID is the idempotency key of a message: the Courier-Message-Id header courier sets
// (the outbox id, prefixed by the source name for a producer database), falling back to
// Nats-Msg-Id and, for a message published with neither, to its stream sequence.
func MessageID(msg jetstream.Msg) string {
	if id := msg.Headers().Get(mq.HeaderMessageID); id != "" {
		return id
	}
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id
	}
	if md, err := msg.Metadata(); err == nil {
		return md.Stream + "/seq/" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return ""
}

// Incoming is one delivered message, whatever the broker: its idempotency key, its body and
// the broker's delivery count.
type Incoming struct {
	MessageID string
	Data      []byte
	Attempt   uint64
}

// Handle processes one JetStream message (process) and then acknowledges it, naks it with a
// delay (the broker redelivers it) or terminates it, by the outcome.
func (h *Handler) Handle(ctx context.Context, msg jetstream.Msg) Delivery {
	in := Incoming{MessageID: MessageID(msg), Data: msg.Data()}
	if md, err := msg.Metadata(); err == nil {
		in.Attempt = md.NumDelivered
	}
	d := h.process(ctx, in)
	log := h.logger().With("consumer", d.Consumer, "message_id", d.MessageID)
	switch d.Outcome {
	case Rejected:
		if err := msg.TermWithReason("invalid registration payload"); err != nil {
			log.Warn("term failed", "err", err)
		}
	case Retry:
		if err := msg.NakWithDelay(h.nakDelay()); err != nil {
			log.Warn("nak failed; the message is redelivered after the ack wait", "err", err)
		}
	default:
		// Committed: acknowledge. If the ack is lost the message comes back and is a Duplicate.
		if err := msg.DoubleAck(ctx); err != nil {
			log.Warn("ack failed; the redelivery will be skipped as a duplicate", "err", err)
		}
	}
	h.observe(d)
	return d
}

func (h *Handler) nakDelay() time.Duration {
	if h.NakDelay > 0 {
		return h.NakDelay
	}
	return DefaultNakDelay
}

// process records the message id and grants the reward in one transaction; the caller
// acknowledges the message only after that transaction committed.
func (h *Handler) process(ctx context.Context, in Incoming) Delivery {
	d := Delivery{Consumer: h.Reward.Consumer, MessageID: in.MessageID, Attempt: in.Attempt}
	log := h.logger().With("consumer", d.Consumer, "message_id", d.MessageID, "attempt", d.Attempt)

	var ev UserRegistered
	if err := json.Unmarshal(in.Data, &ev); err != nil || ev.UserID <= 0 || d.MessageID == "" {
		if err == nil {
			err = errors.New("payload has no user_id or message has no id")
		}
		d.Outcome, d.Err = Rejected, err
		log.Error("message rejected: cannot be processed", "err", err)
		return d
	}
	d.UserID = ev.UserID
	log = log.With("user_id", ev.UserID)

	var detail string
	err := h.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.ExecContext(ctx,
			`INSERT INTO processed_messages (consumer, message_id) VALUES (?, ?)
			 ON CONFLICT (consumer, message_id) DO NOTHING`,
			h.Reward.Consumer, d.MessageID)
		if err != nil {
			return fmt.Errorf("record message: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			d.Outcome = Duplicate
			return nil
		}
		granted, det, err := h.Reward.Grant(ctx, tx, ev, d.MessageID)
		if err != nil {
			return err
		}
		detail = det
		d.Outcome = AlreadyGranted
		if granted {
			d.Outcome = Granted
		}
		if h.BeforeCommit != nil {
			return h.BeforeCommit(ctx, d.MessageID)
		}
		return nil
	})
	if err != nil {
		d.Outcome, d.Err = Retry, err
		log.Warn("processing failed, rolled back; will be redelivered", "delay", h.nakDelay(), "err", err)
		return d
	}
	switch d.Outcome {
	case Granted:
		log.Info("granted "+h.Reward.Consumer, "detail", detail)
	case AlreadyGranted:
		log.Info("skipped: user already has a "+h.Reward.Consumer+" reward", "detail", "new message id, reward exists")
	case Duplicate:
		log.Info("skipped duplicate message")
	}
	return d
}

func (h *Handler) observe(d Delivery) {
	if h.Observe != nil {
		h.Observe(d)
	}
}

func (h *Handler) logger() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.Default()
}

// EnsureStream creates or updates the REGISTRATION stream capturing the registration topics
// (both, so that one NATS can serve both rewards; with points on RabbitMQ its subject simply
// stays empty here).
func EnsureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "courier registration example: registration events",
		Subjects:    RegistrationTopics,
		Storage:     jetstream.FileStorage,
		Duplicates:  DuplicateWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamName, err)
	}
	return s, nil
}

// ConsumerConfig is the durable pull consumer of one reward, reading its topic.
func ConsumerConfig(r Reward) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       r.Consumer,
		Description:   "courier registration example: " + r.Consumer + " reward",
		FilterSubject: r.Topic,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxDeliver:    -1, // never give up: a failure is retried until it succeeds
	}
}

// StartConsumer creates (or updates) the reward's durable consumer and starts handling its
// messages. The returned stop function stops fetching, waits for the message in hand to
// finish, and is safe to call more than once.
func StartConsumer(ctx context.Context, js jetstream.JetStream, h *Handler) (stop func(), err error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, StreamName, ConsumerConfig(h.Reward))
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", h.Reward.Consumer, err)
	}
	// A message in hand finishes even when ctx is cancelled: stopping must not turn a commit
	// into a rollback halfway.
	base := context.WithoutCancel(ctx)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		mctx, cancel := context.WithTimeout(base, handleTimeout)
		defer cancel()
		h.Handle(mctx, msg)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		h.logger().Warn("consume", "consumer", h.Reward.Consumer, "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", h.Reward.Consumer, err)
	}
	return func() {
		cc.Stop()
		select {
		case <-cc.Closed():
		case <-time.After(handleTimeout):
		}
	}, nil
}

// CouponRow is a row of the coupons table.
type CouponRow struct {
	UserID    int64
	Code      string
	MessageID string
	GrantedAt string
}

// PointsRow is a row of the points table.
type PointsRow struct {
	UserID    int64
	Amount    int
	MessageID string
	GrantedAt string
}

// ListCoupons returns every coupon by user id.
func ListCoupons(ctx context.Context, db bun.IDB) ([]CouponRow, error) {
	rows, err := db.QueryContext(ctx,
		`SELECT user_id, code, message_id, CAST(granted_at AS TEXT) FROM coupons ORDER BY user_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []CouponRow
	for rows.Next() {
		var c CouponRow
		if err := rows.Scan(&c.UserID, &c.Code, &c.MessageID, &c.GrantedAt); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ListPoints returns every points grant by user id.
func ListPoints(ctx context.Context, db bun.IDB) ([]PointsRow, error) {
	rows, err := db.QueryContext(ctx,
		`SELECT user_id, amount, message_id, CAST(granted_at AS TEXT) FROM points ORDER BY user_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PointsRow
	for rows.Next() {
		var p PointsRow
		if err := rows.Scan(&p.UserID, &p.Amount, &p.MessageID, &p.GrantedAt); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
