package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"
)

// baseWorker is the HTTP worker of the engine-only baselines (a workflow per task, a
// standalone activity per task): it works cfg.Work on each job it is posted, logging the push
// in pl, then answers 200; post is the activity body that posts a job to it.
type baseWorker struct {
	srv *httptest.Server
	hc  *http.Client
}

func newBaseWorker(cfg TasksConfig, pl *pushLog) *baseWorker {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var j taskBaseJob
		if err := json.NewDecoder(r.Body).Decode(&j); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		defer pl.end(pl.begin(j.ID, j.Priority))
		select {
		case <-time.After(cfg.Work):
		case <-r.Context().Done():
			http.Error(rw, "gone", http.StatusServiceUnavailable)
			return
		}
		rw.WriteHeader(http.StatusOK)
	}))
	return &baseWorker{srv: srv, hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.Limit}}}
}

func (b *baseWorker) close() {
	b.hc.CloseIdleConnections()
	b.srv.Close()
}

// post is the baselines' activity: it posts the job to the worker and fails unless it answers 200.
func (b *baseWorker) post(ctx context.Context, j taskBaseJob) error {
	body, err := json.Marshal(j)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("push: %d", resp.StatusCode)
	}
	return nil
}
