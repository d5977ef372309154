package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/pauses"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
)

// recordScreenshotsEnv, when set, makes TestConsoleInABrowser write the console's screenshots
// under docs/ (the README links them): COURIER_RECORD_SCREENSHOTS=1 go test -run
// TestConsoleInABrowser ./integration/
const recordScreenshotsEnv = "COURIER_RECORD_SCREENSHOTS"

// chromiumPath finds Debian's chromium. Without it the browser test is skipped, except in CI
// (.ci/run installs it), where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the browser test needs chromium in CI (.ci/run installs Debian's chromium package)")
	}
	t.Skip("skipping the console's browser test: no chromium on PATH (apt-get install chromium)")
	return ""
}

// consoleBrowser drives one headless Chromium tab against the console.
type consoleBrowser struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func newConsoleBrowser(t *testing.T, chrome, base string) *consoleBrowser {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 800),
	)
	t.Cleanup(cancelAlloc)
	tctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	// Start the browser on the tab's own context: it lives as long as that, not as one step's.
	require.NoError(t, chromedp.Do(tctx), "start chromium")
	return &consoleBrowser{t: t, ctx: tctx, base: base}
}

// stepTimeout bounds each browser step.
const stepTimeout = 30 * time.Second

func (b *consoleBrowser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		html, _ := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("main")))
		b.t.Fatalf("browser step failed: %v\nat %s\n%.2000s", err, b.location(), html)
	}
}

func (b *consoleBrowser) open(path string) { b.t.Helper(); b.do(chromedp.Navigate(b.base + path)) }

func (b *consoleBrowser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(b.t, err, sel)
	return strings.TrimSpace(s)
}

func (b *consoleBrowser) eval(js string) bool {
	b.t.Helper()
	ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js))
	require.NoError(b.t, err, js)
	return ok
}

func (b *consoleBrowser) location() string {
	b.t.Helper()
	u, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(b.t, err)
	return u
}

// until reloads path until cond holds on the page.
func (b *consoleBrowser) until(path string, cond func() bool, what string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool {
		b.open(path)
		return cond()
	}, time.Minute, 200*time.Millisecond, what)
}

// The console in a real browser against a running courier (Temporal, NATS, SQLite, the
// worker's relay and timers, the gateway): sign in, watch a backlog appear, redrive a dead
// record and see it sent, and see producers' markup rendered as text, pause a queue and see
// its pushes stop until it is resumed.
func TestConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Temporal and Chromium")
	}
	chrome := chromiumPath(t)
	s := newStack(t, "sqlite")
	s.timerWorker(true) // relays the outbox, delivers timers; no task claimer, so tasks wait
	ctx := t.Context()
	ns := s.ts.GetDefaultNamespace()
	svc := s.timerService()
	taskSvc := tasks.NewService(s.store, s.tc, ns, nil, nil, quiet)
	gw := gateway.New(gateway.Config{Console: gateway.ConsoleConfig{TemporalUIURL: "http://127.0.0.1:8233", Namespace: ns}}, gateway.Deps{
		Keys: s.store, Outbox: s.store, Runs: relay.DeliveryRuns{Temporal: s.tc, Wait: 2 * time.Second},
		BizTypes: s.store, Timers: svc, Schedules: svc, Tasks: taskSvc, Secrets: s.store, Logger: quiet,
		Overview: s.store, TimerOverview: svc, Pauses: pauses.NewService(s.store, quiet),
		Checks: []gateway.Check{
			{Name: "database", Probe: s.store.Ping},
			{Name: "temporal", Probe: func(ctx context.Context) error {
				_, err := s.tc.CheckHealth(ctx, &client.CheckHealthRequest{})
				return err
			}},
			{Name: "mq:default", Optional: true, Probe: s.pub.Ping},
		},
	})
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	_, admin, err := s.store.CreateAPIKey(ctx, "ops", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(t, err)
	_, workerKey, err := s.store.CreateAPIKey(ctx, "parser", []apikey.Scope{apikey.ScopeWorker})
	require.NoError(t, err)
	_, _, err = s.store.PutQueue(ctx, courier.Queue{Name: "docs", ConcurrencyLimit: 4}.WithDefaults())
	require.NoError(t, err)
	s.bizType("order.close", 0)
	for _, id := range []string{"o-1001", "o-1002"} {
		_, _, err := svc.Create(ctx, api.TimerRequest{BizType: "order.close", BizID: id, When: api.After(20 * time.Minute)})
		require.NoError(t, err)
	}
	_, err = svc.CreateSchedule(ctx, "nightly-report", api.ScheduleSpec{BizType: "order.close", Cron: "0 2 * * *"})
	require.NoError(t, err)

	b := newConsoleBrowser(t, chrome, srv.URL)

	// Sign in: the console sends a stranger to its sign-in page. A worker key (results and
	// heartbeats only) may not read it and stays there, told why.
	b.open("/console")
	require.Contains(t, b.location(), "/console/login")
	b.do(chromedp.SendKeys(chromedp.CSS(`input[name="key"]`), workerKey), chromedp.Submit(chromedp.CSS("form.login")),
		chromedp.WaitVisible(chromedp.CSS(`p.problem[data-code="permission_denied"]`)))
	require.Contains(t, b.text("p.problem"), "producer scope")
	require.Contains(t, b.location(), "/console/login")
	b.do(chromedp.SendKeys(chromedp.CSS(`input[name="key"]`), admin), chromedp.Submit(chromedp.CSS("form.login")),
		chromedp.WaitVisible(chromedp.ID("queues")))
	require.Contains(t, b.text("header .who"), "admin")
	require.Equal(t, "0", b.text(`tr[data-queue="docs"] td.total`), "no backlog yet")
	require.Equal(t, "per-attempt", b.text(`tr[data-queue="docs"] td.mode`), "the queue's dispatch mode")

	// A backlog appears: tasks wait in the docs queue (nothing pushes them), by band.
	for i, prio := range []int{1, 1, 2, 5, 5} {
		_, _, err := taskSvc.Insert(ctx, courier.TaskRequest{TaskID: fmt.Sprintf("doc-%d", i+1), Version: 1, Priority: prio, Queue: "docs",
			Payload: json.RawMessage(`{"file":"report.pdf"}`)})
		require.NoError(t, err)
	}
	b.open("/console")
	require.Equal(t, "5", b.text(`tr[data-queue="docs"] td.total`))
	require.Equal(t, "2", b.text(`tr[data-queue="docs"] td[data-band="1"]`))
	require.Equal(t, "1", b.text(`tr[data-queue="docs"] td[data-band="2"]`))
	require.Equal(t, "2", b.text(`tr[data-queue="docs"] td[data-band="5"]`))
	b.until("/console", func() bool {
		return b.eval(`!!document.querySelector('tr[data-biz-type="order.close"]')`) &&
			b.text(`tr[data-biz-type="order.close"] td.due`) == "2"
	}, "the timers due in the next hour show per business type")

	// A dead record, redriven from the console once its stream exists, is sent.
	rec, err := s.store.EnqueueOutbox(ctx, outbox.Message{Topic: "orders.created", Key: "o-1001", Payload: []byte(`{"order":1001}`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := s.store.GetOutbox(ctx, rec.ID)
		return err == nil && r.Status == courier.OutboxDead
	}, time.Minute, 50*time.Millisecond, "no stream captures orders.created: the record goes dead")
	b.open("/console")
	require.Equal(t, "1", b.text(`tr[data-topic="orders.created"] td.n`), "dead records by topic")
	b.open("/console/outbox?status=dead")
	row := fmt.Sprintf(`tr[data-id="%d"]`, rec.ID)
	require.Contains(t, b.text(row+" td.error-text"), "orders.created")
	s.createStream("ORDERS", "orders.>")
	b.do(chromedp.Click(chromedp.CSS(row+" button")), chromedp.WaitVisible(chromedp.CSS("#record-status, section.error")))
	require.Contains(t, b.text(".flash"), "Redriven")
	b.until(fmt.Sprintf("/console/outbox/%d", rec.ID), func() bool { return b.text("#record-status") == "sent" }, "the redriven record is sent")
	counts, _ := s.streamIDs("ORDERS")
	require.Equal(t, 1, counts[idString(rec.ID)], "published once")

	// Stored XSS: what producers wrote is shown as text, never run.
	const markup = `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`
	ids, err := outbox.Enqueue(ctx, s.store.DB(), outbox.Message{Topic: "payments.failed", Key: markup, Payload: []byte(`{"note":"<b>hi</b>"}`),
		Headers: map[string]string{"X-Note": markup}})
	require.NoError(t, err)
	// Claimed by the relay, it is published (no stream: dead at once); the row is then marked
	// with an error text of the producer's markup.
	require.Eventually(t, func() bool {
		r, err := s.store.GetOutbox(ctx, ids[0])
		return err == nil && r.Status == courier.OutboxDead
	}, time.Minute, 50*time.Millisecond)
	_, err = s.store.DB().NewRaw("UPDATE courier_outbox SET last_error = ? WHERE id = ?", "broker said: "+markup, ids[0]).Exec(ctx)
	require.NoError(t, err)
	_, _, err = taskSvc.Insert(ctx, courier.TaskRequest{TaskID: `<img src=x onerror="window.__xss=3">`, Version: 1, Queue: "docs", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	inert := `window.__xss === undefined && document.querySelectorAll('img').length === 0 && document.querySelectorAll('script').length === 0`
	for _, path := range []string{"/console/outbox?status=dead", fmt.Sprintf("/console/outbox/%d", ids[0]), "/console/tasks?queue=docs", "/console"} {
		b.open(path)
		require.True(t, b.eval(inert), "%s: the markup is inert", path)
	}
	b.open("/console/outbox?status=dead")
	require.Contains(t, b.text(fmt.Sprintf(`tr[data-id="%d"] td.error-text`, ids[0])), `<script>window.__xss=2</script>`, "shown as text")
	b.open("/console/tasks?queue=docs")
	require.Contains(t, b.text(`table.tasks tbody`), `<img src=x onerror="window.__xss=3">`)

	// A schedule is paused and resumed from the overview, through the API's schedule service.
	sched := `tr[data-schedule="nightly-report"]`
	b.open("/console")
	b.do(chromedp.Click(chromedp.CSS(sched+" button")), chromedp.WaitVisible(chromedp.CSS(".flash")))
	require.Equal(t, "Paused.", b.text(".flash"))
	got, err := svc.GetSchedule(ctx, "nightly-report")
	require.NoError(t, err)
	require.True(t, got.Paused)
	require.Contains(t, got.Note, "paused in the console")
	// The list comes from Temporal's visibility, which follows the change within a moment.
	b.until("/console", func() bool { return b.text(sched+" .badge") == "paused" }, "the overview shows the schedule paused")
	b.do(chromedp.Click(chromedp.CSS(sched+" button")), chromedp.WaitVisible(chromedp.CSS(".flash")))
	b.until("/console", func() bool { return b.text(sched+" .badge") == "running" }, "and running again")

	t.Run("pause a queue and see pushes stop", func(t *testing.T) {
		// A courier worker with a task claimer, obeying the pauses, pushing the scans queue to a
		// test task worker that holds each push (the docs queue has no push URL: it stays put).
		s.watchPauses()
		ts := &taskStack{stack: s, gw: srv.URL, recoverAfter: 5 * time.Second}
		ts.startTaskWorker()
		tw := startTaskWorker(t, func(*taskWorker, api.TaskPush) {})
		_, _, err := s.store.PutQueue(ctx, courier.Queue{Name: "scans", ConcurrencyLimit: 4, PushURL: tw.url}.WithDefaults())
		require.NoError(t, err)
		n := 0
		pauseQueueInBrowser(t, b, "scans", func() {
			n++
			_, _, err := taskSvc.Insert(ctx, courier.TaskRequest{TaskID: fmt.Sprintf("scan-%d", n), Version: 1, Queue: "scans",
				Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
		}, func() int { return int(tw.pushes.Load()) })
	})

	if os.Getenv(recordScreenshotsEnv) != "" {
		recordConsoleScreenshots(t, b)
	}
}

// pauseQueueInBrowser pauses a queue from the overview, sees that a task inserted meanwhile is
// not pushed, resumes it and sees the push: the browser step of flow control. insert adds a
// task to the queue; pushed counts the pushes its worker received.
func pauseQueueInBrowser(t *testing.T, b *consoleBrowser, queue string, insert func(), pushed func() int) {
	row := `tr[data-queue="` + queue + `"]`
	b.open("/console")
	// Each click waits for the page that shows its outcome (the row's form turned around), not
	// for a flash: the page before it may show one already.
	b.do(chromedp.Click(chromedp.CSS(row+" form button")), chromedp.WaitVisible(chromedp.CSS(row+` form[action="/console/resume"]`)))
	require.Equal(t, "paused", b.text(row+" .badge"))
	before := pushed()
	insert()
	require.Never(t, func() bool { return pushed() > before }, 3*time.Second, 100*time.Millisecond, "a paused queue pushes nothing")
	b.do(chromedp.Click(chromedp.CSS(row+" form button")), chromedp.WaitVisible(chromedp.CSS(row+` form[action="/console/pause"]`)))
	require.Equal(t, "running", b.text(row+" .badge"))
	require.Eventually(t, func() bool { return pushed() > before }, time.Minute, 50*time.Millisecond, "resumed, the task is pushed")
}

// recordConsoleScreenshots writes the overview and the outbox list as PNG files under docs/.
func recordConsoleScreenshots(t *testing.T, b *consoleBrowser) {
	for _, shot := range []struct {
		path, file string
		height     int64
	}{
		{"/console", "console-overview.png", 1180},
		{"/console/outbox", "console-outbox.png", 520},
	} {
		b.do(chromedp.EmulateViewport(1200, shot.height))
		b.open(shot.path)
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		out := filepath.Join("..", "docs", shot.file)
		require.NoError(t, os.WriteFile(out, png, 0o644))
		t.Logf("wrote %s (%d bytes)", out, len(png))
	}
}
