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
	"time"

	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/webhook"
)

// Defaults of the command-line flags.
const (
	defaultDB          = "sqlite:/tmp/orders.db"
	defaultHTTP        = "127.0.0.1:8091"
	defaultCourierURL  = "http://127.0.0.1:8080" // courier dev's gateway
	defaultBizType     = "order.close"
	defaultTimeout     = 30 * time.Minute
	defaultCallbackURL = "http://127.0.0.1:8091" + CallbackPath
)

const usage = `ordertimeout: courier's "close this order in 30 minutes unless it is paid" example.

Usage:
  ordertimeout setup  [--courier-url URL] [--courier-key KEY] [--biz-type NAME]
                      [--callback-url URL] [--rotate]
        configure the business type on courier (admin key) and print its signing secret
  ordertimeout orders [--db URL] [--http ADDR] [--timeout DURATION] [--biz-type NAME]
                      [--courier-url URL] [--courier-key KEY] [--secret whsec_…]
        the order service: POST /orders, GET /orders/{id}, POST /orders/{id}/pay,
        POST /orders/{id}/extend, POST /callbacks/order-close

--db takes sqlite:PATH. Flags default to ORDERS_DB, ORDERS_HTTP, ORDER_TIMEOUT, COURIER_URL,
COURIER_API_KEY and ORDER_TIMER_SECRET when those are set.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], os.Stdout, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand and returns when it finishes or ctx is cancelled.
func run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var (
		courierURL, courierKey, bizType string
		db, addr, secret, callbackURL   string
		timeout                         time.Duration
		rotate                          bool
	)
	fs.StringVar(&courierURL, "courier-url", env("COURIER_URL", defaultCourierURL), "courier gateway URL (COURIER_URL)")
	fs.StringVar(&courierKey, "courier-key", os.Getenv("COURIER_API_KEY"), "courier API key; setup needs an admin key (COURIER_API_KEY)")
	fs.StringVar(&bizType, "biz-type", defaultBizType, "courier business type of the close-order timers")
	switch cmd {
	case "setup":
		fs.StringVar(&callbackURL, "callback-url", defaultCallbackURL, "where courier POSTs fired timers")
		fs.BoolVar(&rotate, "rotate", false, "PUT even if the business type exists: courier replaces its secret with a new one")
	case "orders":
		fs.StringVar(&db, "db", env("ORDERS_DB", defaultDB), "database: sqlite:PATH (ORDERS_DB)")
		fs.StringVar(&addr, "http", env("ORDERS_HTTP", defaultHTTP), "HTTP listen address (ORDERS_HTTP)")
		fs.StringVar(&secret, "secret", os.Getenv("ORDER_TIMER_SECRET"), "the business type's whsec_ signing secret, printed by setup (ORDER_TIMER_SECRET)")
		fs.DurationVar(&timeout, "timeout", defaultTimeout, "how long an unpaid order stays open (ORDER_TIMEOUT)")
		if v := os.Getenv("ORDER_TIMEOUT"); v != "" {
			if err := fs.Set("timeout", v); err != nil {
				return fmt.Errorf("ORDER_TIMEOUT: %w", err)
			}
		}
	default:
		return fmt.Errorf("unknown command %q\n\n%s", cmd, usage)
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", cmd, fs.Args())
	}
	cc := &CourierClient{BaseURL: courierURL, Key: courierKey}

	if cmd == "setup" {
		return Setup(ctx, cc, bizType, callbackURL, rotate, stdout)
	}

	if secret == "" {
		return errors.New("orders: --secret (or ORDER_TIMER_SECRET) is required: the whsec_ secret `ordertimeout setup` printed")
	}
	verifier, err := webhook.NewVerifier(secret)
	if err != nil {
		return fmt.Errorf("orders: --secret: %w", err)
	}
	if timeout <= 0 {
		return errors.New("orders: --timeout must be positive")
	}
	if courierKey == "" {
		log.Warn("no courier API key (--courier-key or COURIER_API_KEY): pay and extend cannot reach courier's timer API")
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := SetupDB(ctx, st.DB()); err != nil {
		return err
	}
	svc := &Service{DB: st.DB(), Courier: cc, Verifier: verifier, BizType: bizType, Timeout: timeout, Log: log}
	return serveHTTP(ctx, addr, svc.Handler(), log,
		"biz_type", bizType, "timeout", timeout.String(), "courier", courierURL, "db", db)
}

// serveHTTP listens on addr and serves h until ctx is cancelled, then shuts down gracefully.
func serveHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger, attrs ...any) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("orders: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("orders service listening", append([]any{"addr", "http://" + ln.Addr().String()}, attrs...)...)
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
	log.Info("orders service stopped")
	return nil
}

// env returns the environment variable name, or def when it is unset or empty.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
