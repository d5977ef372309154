// Command courier-cluster runs courier's production topology on this machine, from source and
// without Docker: it builds the Temporal server courier pins and its schema tool, starts two
// private PostgreSQL instances (initdb), Temporal as separate frontend, history, matching and
// worker processes, the Temporal UI, NATS, courier migrate, two workers and two gateways,
// prints where everything is, and stops it all on Ctrl-C or SIGTERM. `make cluster` runs it;
// docs/deployment.md describes the topology.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/courier-oss/courier/internal/cluster"
)

func main() {
	if err := run(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "courier-cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("courier-cluster", flag.ContinueOnError)
	dir := fs.String("dir", ".courier-cluster", "where the databases, NATS's files, the binaries and the logs go; kept between runs")
	fresh := fs.Bool("fresh", false, "delete --dir first: new databases, a new API key")
	shards := fs.Int("shards", cluster.DefaultHistoryShards, "Temporal history shards (fixed for the life of --dir)")
	workers := fs.Int("workers", cluster.DefaultWorkers, "courier worker processes")
	gateways := fs.Int("gateways", cluster.DefaultGateways, "courier gateway processes")
	frontend := fs.Int("temporal-port", 7233, "Temporal frontend gRPC port")
	uiPort := fs.Int("ui-port", 8233, "Temporal UI port")
	natsPort := fs.Int("nats-port", 4322, "NATS port (never 4222, so a local NATS keeps its port)")
	gwPorts := fs.String("gateway-ports", "8080,8081", "gateway ports, comma-separated (free ports for the rest)")
	wkPorts := fs.String("worker-ports", "9190,9191", "worker /metrics and /healthz ports, comma-separated")
	temporalOnly := fs.Bool("temporal-only", false, "run Temporal, its PostgreSQL and the UI alone, for courier bench --temporal-address")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: courier-cluster [flags]\n\nRuns courier's production topology on this machine (docs/deployment.md). Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	gws, err := ports(*gwPorts)
	if err != nil {
		return fmt.Errorf("--gateway-ports: %w", err)
	}
	wks, err := ports(*wkPorts)
	if err != nil {
		return fmt.Errorf("--worker-ports: %w", err)
	}
	if *natsPort == 4222 {
		return errors.New("--nats-port 4222 is reserved for a system NATS; pick another port")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *fresh {
		if err := os.RemoveAll(*dir); err != nil {
			return err
		}
	}
	start := time.Now()
	step := func(s string) { fmt.Printf("  %5.1fs  %s\n", time.Since(start).Seconds(), s) }
	bins, err := cluster.Build(ctx, filepath.Join(*dir, "bin"), step)
	if err != nil {
		return err
	}
	c, err := cluster.Start(ctx, cluster.Config{
		Dir: *dir, Binaries: bins, HistoryShards: *shards, Workers: *workers, Gateways: *gateways,
		FrontendPort: *frontend, UIPort: *uiPort, NATSPort: *natsPort, GatewayPorts: gws, WorkerPorts: wks,
		TemporalOnly: *temporalOnly, Progress: step,
	})
	if err != nil {
		return err
	}
	if *temporalOnly {
		fmt.Printf(`
Temporal is up (%.1fs)
%s
Try:  courier bench tasks --temporal-address %s
Stop with Ctrl-C.
`, time.Since(start).Seconds(), c.Describe(), c.Frontend())
	} else {
		fmt.Printf(`
courier cluster is up (%.1fs)
%s
Try:  curl -H "Authorization: Bearer %s" %s/v1/outbox
Stop with Ctrl-C.
`, time.Since(start).Seconds(), c.Describe(), c.APIKey(), c.GatewayURLs()[0])
	}

	var exitErr error
	if p := c.Exited(ctx); p != nil {
		exitErr = fmt.Errorf("%s exited (%v); its log: %s", p.Name, p.ExitErr(), p.LogPath())
	}
	stop() // a second Ctrl-C now kills the orchestrator at once
	fmt.Println("stopping: gateways, workers, Temporal, databases")
	c.Stop()
	if exitErr == nil {
		fmt.Println("courier cluster stopped; data kept in", *dir)
	}
	return exitErr
}

// ports parses a comma-separated list of ports.
func ports(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%q is not a port", f)
		}
		out = append(out, p)
	}
	return out, nil
}
