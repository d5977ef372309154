package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/worker"
)

// runWorker runs the Temporal worker and the relay, with /metrics, /healthz and /readyz on the
// HTTP address, until SIGINT/SIGTERM.
func runWorker(ctx context.Context, args []string) error {
	a, ln, err := startProcess(ctx, "worker", args, "127.0.0.1:9090", "worker metrics")
	if err != nil {
		return err
	}
	defer a.close()
	cfg := a.cfg
	if err := worker.EnsureSearchAttributes(ctx, a.temporal, cfg.Temporal.Namespace); err != nil {
		a.log.Warn("could not register search attributes; register them with the Temporal CLI", "error", err)
	}
	if cfg.Tasks.PublicURL == "" {
		a.log.Warn("COURIER_PUBLIC_URL is not set: task pushes carry report links without a host; set it to the gateway's URL as task workers reach it")
	}
	w, err := a.startWorker(ctx)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	serveHealth(mux, a.workerHealth(w), w.Loops(), a.log)
	done := serve(ctx, ln, mux, cfg.RequestTimeout, cfg.ShutdownTimeout, a.log)
	a.log.Info("courier worker running", "temporal", cfg.Temporal.Address, "namespace", cfg.Temporal.Namespace, "metrics", "http://"+ln.Addr().String()+"/metrics")
	<-ctx.Done()
	a.log.Info("stopping: letting in-flight activities finish", "timeout", cfg.ShutdownTimeout)
	w.Stop()
	return <-done
}

// runGateway serves the HTTP API until SIGINT/SIGTERM.
func runGateway(ctx context.Context, args []string) error {
	a, ln, err := startProcess(ctx, "gateway", args, "127.0.0.1:8080", "gateway")
	if err != nil {
		return err
	}
	defer a.close()
	cfg := a.cfg
	done := serve(ctx, ln, a.newGateway(nil, nil), cfg.RequestTimeout, cfg.ShutdownTimeout, a.log)
	a.log.Info("courier gateway listening", "url", "http://"+ln.Addr().String())
	return <-done
}

// startProcess is how `courier worker` and `courier gateway` start: their flags and
// environment read and checked (the HTTP address defaulting to addr), the HTTP listener open
// (what names it in the error of a port in use) and Temporal, the database and the brokers
// connected. The caller closes the app; a failed start closes what it opened.
func startProcess(ctx context.Context, name string, args []string, addr, what string) (*app, net.Listener, error) {
	var cfg Config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cfg.bind(fs, addr)
	if err := parse(fs, args); err != nil {
		return nil, nil, err
	}
	if err := cfg.Validate(true); err != nil {
		return nil, nil, err
	}
	a := &app{cfg: cfg, log: newLogger(cfg.LogLevel), reg: newRegistry()}
	ln, err := listen(cfg.HTTPAddr, what, "--http-addr or COURIER_HTTP_ADDR")
	if err == nil {
		err = a.connect(ctx, false)
	}
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		a.close()
		return nil, nil, err
	}
	return a, ln, nil
}

// runMigrate applies (or rolls back) migrations on DATABASE_URL.
func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	dbURL := fs.String("database-url", env("DATABASE_URL", ""), "postgres://… or sqlite:PATH (DATABASE_URL)")
	outboxOnly := fs.Bool("outbox-only", false, "install only the outbox table (for a producer's own database)")
	down := fs.String("down", "", "roll back the last migration of this set (outbox or courier) instead")
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if *down != "" {
		set := schema.Set(*down)
		if set != schema.Outbox && set != schema.Courier {
			return fmt.Errorf("--down takes outbox or courier")
		}
		if err := schema.Down(ctx, st.DB(), set); err != nil {
			return err
		}
		fmt.Printf("rolled back the last %s migration\n", set)
		return nil
	}
	sets := schema.AllSets
	if *outboxOnly {
		sets = []schema.Set{schema.Outbox}
	}
	if err := schema.Up(ctx, st.DB(), sets...); err != nil {
		return err
	}
	for _, set := range sets {
		applied, err := schema.Applied(ctx, st.DB(), set)
		if err != nil {
			return err
		}
		fmt.Printf("%s: applied %v\n", set, applied)
	}
	return nil
}

// openDatabase opens the database of --database-url (DATABASE_URL), which the command requires.
func openDatabase(ctx context.Context, url string) (*store.Store, error) {
	if url == "" {
		return nil, fmt.Errorf("DATABASE_URL (or --database-url) is required")
	}
	return store.Open(ctx, url)
}

// runAPIKey creates or revokes API keys, or sets a key's own request rate.
func runAPIKey(ctx context.Context, args []string) error {
	if _, err := pickSubcommand("apikey", "action", []subcommand{
		{"create", "create a key: --name NAME --scopes producer,worker,admin [--rate R --burst B]; prints it once"},
		{"revoke", "revoke a key: --id ID"},
		{"set-rate", "set a key's request rate: --id ID --rate R|default [--burst B]"},
	}, args); err != nil {
		return err
	}
	fs := flag.NewFlagSet("apikey "+args[0], flag.ContinueOnError)
	dbURL := fs.String("database-url", env("DATABASE_URL", ""), "postgres://… or sqlite:PATH (DATABASE_URL)")
	name := fs.String("name", "", "who the key is for")
	scopes := fs.String("scopes", "producer", "comma-separated: producer, worker, admin")
	id := fs.String("id", "", "key id to revoke or to set the rate of")
	rate := fs.String("rate", "", "the key's own request rate per second on each gateway, replacing COURIER_KEY_RATE_LIMIT; 0 = unlimited; \"default\" (set-rate) returns to the gateway's default")
	burst := fs.Int("burst", 0, "the key's burst above its rate; 0 = the rate rounded up")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	keyRate, err := parseKeyRate(*rate, *burst)
	if err != nil {
		return err
	}
	st, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer st.Close()
	switch args[0] {
	case "revoke":
		if err := st.RevokeAPIKey(ctx, *id); err != nil {
			return err
		}
		fmt.Printf("revoked %s\n", *id)
		return nil
	case "set-rate":
		if *rate == "" {
			return errors.New("--rate is required (a number, 0 for unlimited, or default)")
		}
		if err := st.SetAPIKeyRate(ctx, *id, keyRate); err != nil {
			return err
		}
		fmt.Printf("%s: rate %s\n", *id, describeKeyRate(keyRate))
		return nil
	}
	sc, err := apikey.ParseScopes(*scopes)
	if err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("--name is required")
	}
	key, token, err := st.NewAPIKey(ctx, apikey.Key{Name: *name, Scopes: sc, Rate: keyRate})
	if err != nil {
		return err
	}
	fmt.Printf("id:     %s\nscopes: %s\nrate:   %s\nkey:    %s\n(shown once; courier stores only its hash)\n", key.ID, *scopes, describeKeyRate(key.Rate), token)
	return nil
}

// parseKeyRate reads --rate and --burst: empty or "default" is the gateway's default (nil).
func parseKeyRate(rate string, burst int) (*courier.Rate, error) {
	if rate == "" || rate == "default" {
		if burst != 0 {
			return nil, errors.New("--burst needs --rate")
		}
		return nil, nil
	}
	v, err := strconv.ParseFloat(rate, 64)
	if err != nil {
		return nil, fmt.Errorf("--rate %q: want requests per second, 0 for unlimited, or default", rate)
	}
	r := courier.Rate{PerSecond: v, Burst: burst}
	if err := courier.CheckRate("--rate", "--burst", r); err != nil {
		var ce *courier.Error
		if errors.As(err, &ce) {
			return nil, errors.New(ce.Message)
		}
		return nil, err
	}
	return &r, nil
}

func describeKeyRate(r *courier.Rate) string {
	switch {
	case r == nil:
		return "the gateway's default (COURIER_KEY_RATE_LIMIT)"
	case r.Unlimited():
		return "unlimited"
	}
	return fmt.Sprintf("%g/s, burst %d", r.PerSecond, r.EffectiveBurst())
}
