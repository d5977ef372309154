package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"

	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/health"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/worker"
)

// dependencyChecks are the readiness checks of what every role needs: courier's database and
// Temporal (required), each extra outbox source's database as "database:<name>" and each broker
// as "mq:<name>" (optional: either delays only its own records).
func (a *app) dependencyChecks() []health.Check {
	out := []health.Check{
		{Name: "database", Probe: a.store.Ping},
		{Name: "temporal", Probe: func(ctx context.Context) error {
			_, err := a.temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}},
	}
	for _, src := range a.sources {
		if src.Name == courier.DefaultSource {
			continue
		}
		out = append(out, health.Check{Name: "database:" + src.Name, Optional: true, Probe: src.Store.Ping})
	}
	return append(out, a.brokerChecks()...)
}

// workerHealth registers the worker's readiness and loop metrics and returns its readiness
// checks: the dependencies' and the worker's own (its pollers and claim loops).
func (a *app) workerHealth(w *worker.Worker) []health.Check {
	checks := append(a.dependencyChecks(), w.Checks()...)
	a.reg.MustRegister(metrics.NewHealthCollector("worker", func() []health.Check { return checks }, w.Loops()))
	a.workerChecks = w.Checks()
	return checks
}

// serveHealth adds a worker's /healthz and /readyz to mux. /healthz answers 503 only when a
// claim loop has ended no turn for health.WedgedAfter (the process is wedged: restart it);
// /readyz answers 503 while a required check fails, naming each check "ok" or "down" as the
// gateway's does.
func serveHealth(mux *http.ServeMux, checks []health.Check, loops []*health.Loop, log *slog.Logger) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := health.Live(loops); err != nil {
			log.Error("liveness check failed: a claim loop is wedged", "error", err)
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "wedged"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		rep := health.Evaluate(r.Context(), checks)
		for name, err := range rep.Errors {
			log.Warn("readiness check failed", "dependency", name, "error", err)
		}
		status := http.StatusOK
		if !rep.Ready {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, rep)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// gatewayHealth registers the gateway's readiness metric (courier_ready{role="gateway"}) over
// the checks its /readyz runs.
func (a *app) gatewayHealth(checks []gateway.Check) {
	a.reg.MustRegister(metrics.NewHealthCollector("gateway", func() []health.Check { return checks }, nil))
}
