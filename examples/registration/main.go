// Command registration is courier's seed example: "user registered → grant a coupon and
// points", where each reward is granted exactly once per user even when a message arrives
// twice.
//
// It is one binary with several roles:
//
//	registration account   --db sqlite:/tmp/registration.db --http 127.0.0.1:8090
//	registration consumers --nats nats://127.0.0.1:4322 --db sqlite:/tmp/rewards.db
//	registration coupon    …   (only the coupon consumer)
//	registration points    …   (only the points consumer)
//	registration all       --nats … --db sqlite:…   (account and both consumers in one process)
//	registration rewards   --db sqlite:/tmp/rewards.db   (print the granted coupons and points)
//
// The account service (account.go) is a producer with a transactional outbox: POST /register
// inserts the user row and a courier_outbox row (topic user.registered, key = user id) in ONE
// database transaction, so the event exists if and only if the user does. It never talks to
// the broker; courier relays the outbox row to NATS JetStream with Nats-Msg-Id = the outbox id
// (JetStream drops re-publishes inside the stream's duplicate window) and the header
// Courier-Message-Id (registration/<id> for a producer database registered as source
// "registration").
//
// The consumers (rewards.go) read the REGISTRATION stream through durable pull consumers
// named coupon and points. Delivery is at least once, so each handler makes its effect
// idempotent: in one transaction it records (consumer, message id) in processed_messages,
// whose primary key rejects a second copy, and only for a new message inserts the reward into
// a table with a unique user_id. The message is acknowledged only after that transaction
// commits; a failure rolls everything back and the message is redelivered after a delay.
//
// Flags fall back to environment variables: REGISTRATION_DB, NATS_URL and REGISTRATION_HTTP.
// SIGINT or SIGTERM stops every role cleanly. See README.md for a walk-through with courier dev.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/store"
)

// Defaults of the command-line flags.
const (
	defaultAccountDB = "sqlite:/tmp/registration.db"
	defaultRewardsDB = "sqlite:/tmp/rewards.db"
	defaultNATS      = "nats://127.0.0.1:4322" // courier dev's embedded NATS
	defaultHTTP      = "127.0.0.1:8090"
)

const usage = `registration: courier's "user registered → coupon and points" example.

Usage:
  registration account   [--db URL] [--http ADDR]   the account service (POST /register)
  registration consumers [--db URL] [--nats URL]    the coupon and points consumers
  registration coupon    [--db URL] [--nats URL]    only the coupon consumer
  registration points    [--db URL] [--nats URL]    only the points consumer
  registration all       [--db URL] [--nats URL] [--http ADDR]
                                                    account and both consumers in one process
  registration rewards   [--db URL]                 print the granted coupons and points

--db takes sqlite:PATH or postgres://…; flags default to REGISTRATION_DB, NATS_URL and
REGISTRATION_HTTP when those are set.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], os.Stdout, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "registration:", err)
		os.Exit(1)
	}
}

// options are the flags shared by the subcommands.
type options struct {
	db   string
	nats string
	http string
}

// run dispatches to a subcommand and returns when it finishes or ctx is cancelled.
func run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	cmd, rest := args[0], args[1:]
	var opts options
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dbDefault := defaultRewardsDB
	if cmd == "account" || cmd == "all" {
		dbDefault = defaultAccountDB
	}
	fs.StringVar(&opts.db, "db", env("REGISTRATION_DB", dbDefault), "database: sqlite:PATH or postgres://… (REGISTRATION_DB)")
	switch cmd {
	case "account":
		fs.StringVar(&opts.http, "http", env("REGISTRATION_HTTP", defaultHTTP), "HTTP listen address (REGISTRATION_HTTP)")
	case "consumers", "coupon", "points":
		fs.StringVar(&opts.nats, "nats", env("NATS_URL", defaultNATS), "NATS server URL (NATS_URL)")
	case "all":
		fs.StringVar(&opts.http, "http", env("REGISTRATION_HTTP", defaultHTTP), "HTTP listen address (REGISTRATION_HTTP)")
		fs.StringVar(&opts.nats, "nats", env("NATS_URL", defaultNATS), "NATS server URL (NATS_URL)")
	case "rewards":
	default:
		return fmt.Errorf("unknown command %q\n\n%s", cmd, usage)
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", cmd, fs.Args())
	}

	st, err := store.Open(ctx, opts.db)
	if err != nil {
		return err
	}
	defer st.Close()
	db := st.DB()

	switch cmd {
	case "account":
		return runAccount(ctx, db, opts.http, log)
	case "consumers":
		return runConsumers(ctx, db, opts.nats, []Reward{CouponReward, PointsReward}, log)
	case "coupon":
		return runConsumers(ctx, db, opts.nats, []Reward{CouponReward}, log)
	case "points":
		return runConsumers(ctx, db, opts.nats, []Reward{PointsReward}, log)
	case "all":
		return runAll(ctx, db, opts, log)
	default: // rewards
		return printRewards(ctx, db, stdout)
	}
}

// runAccount serves the account service until ctx is cancelled.
func runAccount(ctx context.Context, db *bun.DB, addr string, log *slog.Logger) error {
	if err := SetupAccount(ctx, db); err != nil {
		return err
	}
	acc := &Account{DB: db, Log: log}
	return serveHTTP(ctx, addr, acc.Handler(), log)
}

// serveHTTP listens on addr and serves h until ctx is cancelled, then shuts down gracefully.
func serveHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("account: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("account service listening", "addr", "http://"+ln.Addr().String(), "try", "POST /register")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	log.Info("account service stopped")
	return nil
}

// runConsumers runs one durable consumer per reward until ctx is cancelled.
func runConsumers(ctx context.Context, db *bun.DB, natsURL string, rewards []Reward, log *slog.Logger) error {
	if err := SetupRewards(ctx, db); err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL,
		nats.Name("registration-consumers"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := EnsureStream(ctx, js); err != nil {
		return err
	}
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for _, r := range rewards {
		h := &Handler{DB: db, Reward: r, Log: log}
		stop, err := StartConsumer(ctx, js, h)
		if err != nil {
			return err
		}
		stops = append(stops, stop)
		log.Info("consumer started", "consumer", r.Consumer, "stream", StreamName, "subject", TopicUserRegistered, "nats", natsURL)
	}
	<-ctx.Done()
	log.Info("stopping consumers")
	return nil
}

// runAll runs the account service and both consumers in one process on one database.
func runAll(ctx context.Context, db *bun.DB, opts options, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- runConsumers(ctx, db, opts.nats, []Reward{CouponReward, PointsReward}, log) }()
	go func() { errc <- runAccount(ctx, db, opts.http, log) }()
	first := <-errc
	cancel() // one part stopped (or failed): stop the other
	second := <-errc
	return errors.Join(first, second)
}

// printRewards writes the coupons and points tables to w.
func printRewards(ctx context.Context, db *bun.DB, w io.Writer) error {
	if err := SetupRewards(ctx, db); err != nil {
		return err
	}
	coupons, err := ListCoupons(ctx, db)
	if err != nil {
		return err
	}
	points, err := ListPoints(ctx, db)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "COUPONS (%d)\n", len(coupons))
	fmt.Fprintln(tw, "user_id\tcode\tmessage_id\tgranted_at")
	for _, c := range coupons {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", c.UserID, c.Code, c.MessageID, c.GrantedAt)
	}
	fmt.Fprintf(tw, "\nPOINTS (%d)\n", len(points))
	fmt.Fprintln(tw, "user_id\tamount\tmessage_id\tgranted_at")
	for _, p := range points {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", p.UserID, p.Amount, p.MessageID, p.GrantedAt)
	}
	return tw.Flush()
}

// env returns the environment variable name, or def when it is unset or empty.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
