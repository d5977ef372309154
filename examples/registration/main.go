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
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/mq"
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
  registration consumers [--db URL] [--nats URL] [--points-broker URL] [--coupons-broker URL]
                                                    the coupon and points consumers
  registration coupon    [--db URL] [--nats URL] [--coupons-broker URL]
                                                    only the coupon consumer
  registration points    [--db URL] [--nats URL] [--points-broker URL]
                                                    only the points consumer
  registration all       [--db URL] [--nats URL] [--points-broker URL] [--coupons-broker URL] [--http ADDR]
                                                    account and both consumers in one process
  registration rewards   [--db URL]                 print the granted coupons and points

--db takes sqlite:PATH or postgres://…. A reward reads from --nats unless its own broker is
given: nats://… (JetStream) or amqp://user:pass@host:5672/[?exchange=name] (RabbitMQ, the same
URL courier publishes to). Flags default to REGISTRATION_DB, NATS_URL, REGISTRATION_HTTP,
REGISTRATION_POINTS_BROKER and REGISTRATION_COUPONS_BROKER when those are set.
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
	db      string
	nats    string
	http    string
	brokers map[string]*string // by reward consumer: its own broker URL ("" = nats)
}

// brokerFor is the broker a reward reads from.
func (o options) brokerFor(r Reward) string {
	if b := o.brokers[r.Consumer]; b != nil && *b != "" {
		return *b
	}
	return o.nats
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
		opts.bindBrokers(fs, cmd)
	case "all":
		fs.StringVar(&opts.http, "http", env("REGISTRATION_HTTP", defaultHTTP), "HTTP listen address (REGISTRATION_HTTP)")
		opts.bindBrokers(fs, cmd)
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
		return runConsumers(ctx, db, opts, []Reward{CouponReward, PointsReward}, log)
	case "coupon":
		return runConsumers(ctx, db, opts, []Reward{CouponReward}, log)
	case "points":
		return runConsumers(ctx, db, opts, []Reward{PointsReward}, log)
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

// bindBrokers registers --nats and each reward's own broker flag for cmd.
func (o *options) bindBrokers(fs *flag.FlagSet, cmd string) {
	fs.StringVar(&o.nats, "nats", env("NATS_URL", defaultNATS), "NATS server URL, for every reward without its own broker (NATS_URL)")
	o.brokers = map[string]*string{}
	for _, r := range []Reward{CouponReward, PointsReward} {
		if cmd != "consumers" && cmd != "all" && cmd != r.Consumer {
			continue
		}
		name := map[string]string{"coupon": "coupons", "points": "points"}[r.Consumer]
		envName := "REGISTRATION_" + strings.ToUpper(name) + "_BROKER"
		o.brokers[r.Consumer] = fs.String(name+"-broker", env(envName, ""),
			"the "+r.Consumer+" consumer's broker: nats://… or amqp://…[?exchange=name] (default --nats; "+envName+")")
	}
}

// runConsumers runs one consumer per reward, each on its broker, until ctx is cancelled.
func runConsumers(ctx context.Context, db *bun.DB, opts options, rewards []Reward, log *slog.Logger) error {
	if err := SetupRewards(ctx, db); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		stops  []func()     // JetStream consumers
		conns  []*nats.Conn // closed after their consumers stopped
		rabbit sync.WaitGroup
	)
	defer func() {
		cancel()
		for _, stop := range stops {
			stop()
		}
		rabbit.Wait() // each finishes the message in hand
		for _, nc := range conns {
			nc.Close()
		}
	}()
	errc := make(chan error, len(rewards))
	js := map[string]jetstream.JetStream{} // one connection per NATS URL
	for _, r := range rewards {
		h := &Handler{DB: db, Reward: r, Log: log}
		url := opts.brokerFor(r)
		switch scheme, _, _ := strings.Cut(url, "://"); scheme {
		case "amqp", "amqps":
			c := &RabbitConsumer{URL: url, Handler: h}
			if _, _, err := rabbitTarget(url); err != nil {
				return err
			}
			rabbit.Add(1)
			go func() {
				defer rabbit.Done()
				errc <- c.Run(ctx)
			}()
		case "nats":
			if js[url] == nil {
				nc, err := nats.Connect(url,
					nats.Name("registration-consumers"),
					nats.MaxReconnects(-1),
					nats.ReconnectWait(500*time.Millisecond),
				)
				if err != nil {
					return fmt.Errorf("connect to NATS at %s: %w", url, err)
				}
				conns = append(conns, nc)
				if js[url], err = jetstream.New(nc); err != nil {
					return err
				}
				if _, err := EnsureStream(ctx, js[url]); err != nil {
					return err
				}
			}
			stop, err := StartConsumer(ctx, js[url], h)
			if err != nil {
				return err
			}
			stops = append(stops, stop)
			log.Info("consumer started", "consumer", r.Consumer, "stream", StreamName, "subject", r.Topic, "nats", url)
		default:
			return fmt.Errorf("%s consumer: broker URL %q: want nats:// or amqp://", r.Consumer, mq.RedactURL(url))
		}
	}
	select {
	case <-ctx.Done():
	case err := <-errc: // a RabbitMQ consumer only returns early on a bad URL
		if err != nil {
			return err
		}
		<-ctx.Done()
	}
	log.Info("stopping consumers")
	return nil
}

// runAll runs the account service and both consumers in one process on one database.
func runAll(ctx context.Context, db *bun.DB, opts options, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- runConsumers(ctx, db, opts, []Reward{CouponReward, PointsReward}, log) }()
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
