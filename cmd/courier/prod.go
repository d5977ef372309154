package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/worker"
)

func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	return fs.Parse(args)
}

// runWorker runs the Temporal worker and the relay, with /metrics and /healthz on the HTTP
// address, until SIGINT/SIGTERM.
func runWorker(ctx context.Context, args []string) error {
	var cfg Config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.bind(fs, "127.0.0.1:9090")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(true); err != nil {
		return err
	}
	a := &app{cfg: cfg, log: newLogger(cfg.LogLevel), reg: newRegistry()}
	defer a.close()
	ln, err := listen(cfg.HTTPAddr, "worker metrics", "--http-addr or COURIER_HTTP_ADDR")
	if err != nil {
		return err
	}
	if err := a.connect(ctx, false); err != nil {
		return err
	}
	if err := worker.EnsureSearchAttributes(ctx, a.temporal, cfg.Temporal.Namespace); err != nil {
		a.log.Warn("could not register search attributes; register them with the Temporal CLI", "error", err)
	}
	if cfg.Tasks.PublicURL == "" {
		a.log.Warn("COURIER_PUBLIC_URL is not set: task pushes carry report links without a host; set it to the gateway's URL as task workers reach it")
	}
	w, err := a.newWorker()
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"status":"ok"}`)) })
	done := serve(ctx, ln, mux, cfg.RequestTimeout, cfg.ShutdownTimeout, a.log)
	a.log.Info("courier worker running", "temporal", cfg.Temporal.Address, "namespace", cfg.Temporal.Namespace, "metrics", "http://"+ln.Addr().String()+"/metrics")
	<-ctx.Done()
	a.log.Info("stopping: letting in-flight activities finish", "timeout", cfg.ShutdownTimeout)
	w.Stop()
	return <-done
}

// runGateway serves the HTTP API until SIGINT/SIGTERM.
func runGateway(ctx context.Context, args []string) error {
	var cfg Config
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfg.bind(fs, "127.0.0.1:8080")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(true); err != nil {
		return err
	}
	a := &app{cfg: cfg, log: newLogger(cfg.LogLevel), reg: newRegistry()}
	defer a.close()
	ln, err := listen(cfg.HTTPAddr, "gateway", "--http-addr or COURIER_HTTP_ADDR")
	if err != nil {
		return err
	}
	if err := a.connect(ctx, false); err != nil {
		return err
	}
	done := serve(ctx, ln, a.newGateway(nil, nil), cfg.RequestTimeout, cfg.ShutdownTimeout, a.log)
	a.log.Info("courier gateway listening", "url", "http://"+ln.Addr().String())
	return <-done
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
	if *dbURL == "" {
		return fmt.Errorf("DATABASE_URL (or --database-url) is required")
	}
	st, err := store.Open(ctx, *dbURL)
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

// runAPIKey creates or revokes API keys.
func runAPIKey(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "revoke") {
		return fmt.Errorf("usage: courier apikey create --name NAME --scopes producer,worker,admin | courier apikey revoke --id ID")
	}
	fs := flag.NewFlagSet("apikey "+args[0], flag.ContinueOnError)
	dbURL := fs.String("database-url", env("DATABASE_URL", ""), "postgres://… or sqlite:PATH (DATABASE_URL)")
	name := fs.String("name", "", "who the key is for")
	scopes := fs.String("scopes", "producer", "comma-separated: producer, worker, admin")
	id := fs.String("id", "", "key id to revoke")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *dbURL == "" {
		return fmt.Errorf("DATABASE_URL (or --database-url) is required")
	}
	st, err := store.Open(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if args[0] == "revoke" {
		if err := st.RevokeAPIKey(ctx, *id); err != nil {
			return err
		}
		fmt.Printf("revoked %s\n", *id)
		return nil
	}
	sc, err := courier.ParseScopes(*scopes)
	if err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("--name is required")
	}
	key, token, err := st.CreateAPIKey(ctx, *name, sc)
	if err != nil {
		return err
	}
	fmt.Printf("id:     %s\nscopes: %s\nkey:    %s\n(shown once; courier stores only its hash)\n", key.ID, *scopes, token)
	return nil
}
