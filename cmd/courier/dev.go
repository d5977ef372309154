//go:build !slim

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
)

// DevConfig is `courier dev`'s configuration on top of the shared runtime flags.
type DevConfig struct {
	DataDir      string // COURIER_DATA_DIR; default ./.courier
	Host         string // COURIER_DEV_HOST; default 127.0.0.1
	HTTPPort     int    // COURIER_HTTP_PORT; default 8080
	TemporalPort int    // COURIER_TEMPORAL_PORT; default 7233
	UIPort       int    // COURIER_UI_PORT; default 8233
	NATSPort     int    // COURIER_NATS_PORT; default 4322 (never 4222, so a local NATS keeps its port)
	// Durable makes the embedded Temporal server sync SQLite on every commit
	// (synchronous=FULL) so acknowledged writes survive a power cut too;
	// COURIER_DEV_DURABLE; default false (synchronous=NORMAL: survives a crash of
	// the process, not of the machine). See docs/deployment.md.
	Durable bool
}

// bind registers `courier dev`'s own flags; e reads their environment variables (the Config's
// reader, so Validate reports what did not parse).
func (d *DevConfig) bind(fs *flag.FlagSet, e *envReader) {
	fs.StringVar(&d.DataDir, "data-dir", env("COURIER_DATA_DIR", ".courier"), "where Temporal, NATS and the SQLite database keep their data (COURIER_DATA_DIR)")
	fs.StringVar(&d.Host, "host", env("COURIER_DEV_HOST", "127.0.0.1"), "address every embedded server listens on (COURIER_DEV_HOST)")
	fs.IntVar(&d.HTTPPort, "http-port", e.integer("COURIER_HTTP_PORT", 8080), "gateway port (COURIER_HTTP_PORT)")
	fs.IntVar(&d.TemporalPort, "temporal-port", e.integer("COURIER_TEMPORAL_PORT", 7233), "Temporal frontend gRPC port (COURIER_TEMPORAL_PORT)")
	fs.IntVar(&d.UIPort, "ui-port", e.integer("COURIER_UI_PORT", 8233), "Temporal Web UI port (COURIER_UI_PORT)")
	fs.IntVar(&d.NATSPort, "nats-port", e.integer("COURIER_NATS_PORT", 4322), "embedded NATS port (COURIER_NATS_PORT)")
	fs.BoolVar(&d.Durable, "durable", e.boolean("COURIER_DEV_DURABLE", false), "sync Temporal's SQLite on every commit, so acknowledged work survives a power cut too; slower (COURIER_DEV_DURABLE)")
}

// temporal is the embedded Temporal server's configuration.
func (d DevConfig) temporal(namespace string, sas map[string]enumspb.IndexedValueType, log *slog.Logger) devstack.Config {
	return devstack.Config{
		DataDir:          d.DataDir,
		Host:             d.Host,
		TemporalPort:     d.TemporalPort,
		UIPort:           d.UIPort,
		Namespace:        namespace,
		SearchAttributes: sas,
		Logger:           log,
		Durable:          d.Durable,
	}
}

func runDev(ctx context.Context, args []string) error {
	var (
		cfg Config
		dev DevConfig
	)
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	dev.bind(fs, &cfg.env)
	cfg.Outbox.StartWorkers = relay.EmbeddedStartWorkers // the engine is in this process
	cfg.bindRuntime(fs)
	cfg.Temporal.Namespace = "courier"
	if err := parse(fs, args); err != nil {
		return err
	}
	if dev.NATSPort == 4222 {
		return errors.New("--nats-port 4222 is reserved for a system NATS; pick another port")
	}
	tuneGC(os.Getenv)
	// Every setting is checked before anything starts; the addresses the embedded stack fills
	// in later stand in here.
	probe := cfg
	probe.Temporal.Address, probe.DatabaseURL, probe.NATSURL = "embedded:7233", "sqlite:embedded.db", "nats://embedded:4222"
	if err := probe.Validate(true); err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel)
	if err := os.MkdirAll(dev.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	// Bind the gateway first: every port is checked before anything starts.
	gwLn, err := listen(net.JoinHostPort(dev.Host, strconv.Itoa(dev.HTTPPort)), "gateway", "--http-port")
	if err != nil {
		return err
	}
	defer gwLn.Close()

	start := time.Now()
	nats, err := embeddednats.Start(embeddednats.Config{Host: dev.Host, Port: dev.NATSPort, StoreDir: filepath.Join(dev.DataDir, "nats")})
	if err != nil {
		return err
	}
	defer nats.Shutdown()

	sas := map[string]enumspb.IndexedValueType{}
	for name, typ := range courier.SearchAttributes {
		sas[name] = worker.IndexedValueType(typ)
	}
	tmp, err := devstack.StartTemporal(ctx, dev.temporal(cfg.Temporal.Namespace, sas, log.With("component", "temporal-server")))
	if err != nil {
		return err
	}
	defer tmp.Stop()

	cfg.Temporal.Address = tmp.Address()
	cfg.DatabaseURL = "sqlite:" + filepath.Join(dev.DataDir, "courier.db")
	cfg.NATSURL = nats.URL()
	if err := cfg.Validate(true); err != nil {
		return err
	}
	if cfg.TemporalUIURL == "" {
		cfg.TemporalUIURL = tmp.UIURL()
	}
	a := &app{cfg: cfg, log: log, reg: newRegistry(), dev: true}
	defer a.close()
	if err := a.connect(ctx, true); err != nil {
		return err
	}
	token, err := devAPIKey(ctx, a, filepath.Join(dev.DataDir, "dev-api-key"))
	if err != nil {
		return err
	}
	if a.cfg.Tasks.PublicURL == "" {
		a.cfg.Tasks.PublicURL = "http://" + gwLn.Addr().String()
	}
	w, err := a.startWorker(ctx)
	if err != nil {
		return err
	}
	a.workerHealth(w) // its metrics beside the gateway's, and its checks in the gateway's /readyz
	done := serve(ctx, gwLn, a.newGateway(w.Relay().Wake, w.WakeTasks), cfg.RequestTimeout, cfg.ShutdownTimeout, log)

	gw := "http://" + gwLn.Addr().String()
	fmt.Printf(`
courier dev is up (%.1fs)
  gateway      %s   (OpenAPI: %s/openapi.yaml, metrics: %s/metrics)%s
  Temporal UI  %s   (namespace %s)
  Temporal     %s
  NATS         %s   (broker "default")%s
  database     %s
  data dir     %s
  API key      %s   (admin; kept in %s)

Try:  curl -H "Authorization: Bearer %s" %s/v1/outbox
Stop with Ctrl-C.
`, time.Since(start).Seconds(), gw, gw, gw, consoleLine(cfg, gw), tmp.UIURL(), tmp.Namespace(), tmp.Address(), nats.URL(),
		extraBrokers(cfg), cfg.DatabaseURL, dev.DataDir, token, filepath.Join(dev.DataDir, "dev-api-key"), token, gw)

	select {
	case <-ctx.Done():
	case err := <-done:
		return err
	}
	log.Info("stopping: no new requests, in-flight activities may finish", "timeout", cfg.ShutdownTimeout)
	serr := <-done // the gateway has stopped accepting and drained
	w.Stop()
	if serr == nil {
		fmt.Println("courier dev stopped cleanly; data kept in", dev.DataDir)
	}
	return serr
}

// devAPIKey reuses the dev admin key kept in the data dir, or creates one.
func devAPIKey(ctx context.Context, a *app, path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		token := strings.TrimSpace(string(b))
		if _, err := a.store.LookupAPIKey(ctx, token); err == nil {
			return token, nil
		}
	}
	_, token, err := a.store.CreateAPIKey(ctx, "courier dev", []apikey.Scope{apikey.ScopeAdmin})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", err
	}
	return token, nil
}

// consoleLine is the start banner's line for the console ("" when it is off).
func consoleLine(cfg Config, gw string) string {
	if !cfg.Console {
		return ""
	}
	return "\n  console      " + gw + "/console   (sign in with the API key below)"
}

// extraBrokers lists the brokers --broker adds to the embedded NATS, and the routes, for the
// start banner.
func extraBrokers(cfg Config) string {
	var b strings.Builder
	for _, spec := range cfg.Brokers.List {
		fmt.Fprintf(&b, "\n  broker       %s = %s", spec.Name, mq.RedactURL(spec.URL))
	}
	if len(cfg.Brokers.Routes) > 0 {
		fmt.Fprintf(&b, "\n  routes       %s", cfg.Brokers.Routes.String())
	}
	return b.String()
}
