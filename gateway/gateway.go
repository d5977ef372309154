package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/health"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/outbox"
)

// OutboxStore is what the outbox endpoints need.
type OutboxStore interface {
	GetOutbox(ctx context.Context, id int64) (courier.OutboxRecord, error)
	ListOutbox(ctx context.Context, f courier.OutboxFilter) ([]courier.OutboxRecord, bool, error)
	RedriveOutbox(ctx context.Context, id int64) (courier.OutboxRecord, error)
	EnqueueOutbox(ctx context.Context, m outbox.Message) (courier.OutboxRecord, error)
	EnqueueOutboxOnce(ctx context.Context, m outbox.Message, key, hash string) (courier.OutboxRecord, bool, error)
	DeadOutbox(ctx context.Context, f courier.DeadFilter, limit int) ([]courier.DeadRef, error)
	RedriveDeadOutbox(ctx context.Context, ids []int64) (int64, error)
	// The ordered mode's blocked keys (docs/flow-control.md, "Ordered keys in the outbox").
	BlockedKeys(ctx context.Context, after string, limit int) ([]courier.BlockedKey, bool, error)
	SkipBlocked(ctx context.Context, id int64) (courier.BlockedKey, error)
}

// RunWaiter waits until no run of a workflow is open (relay.DeliveryRuns): a redrive waits for
// the dead record's last delivery run to close, so the new delivery never attaches to it.
type RunWaiter interface {
	WaitClosed(ctx context.Context, workflowID string) error
}

// Check is one readiness dependency: a name and a probe (health.Check, shared with the
// worker's /readyz).
type Check = health.Check

// Deps are the gateway's collaborators.
type Deps struct {
	Keys      KeyStore
	Outbox    OutboxStore            // courier's own database
	Sources   map[string]OutboxStore // producer databases by source name (read and redrive via ?source=)
	Runs      RunWaiter              // delivery runs; nil skips the wait before a redrive (tests without Temporal)
	BizTypes  BizTypeStore           // business types; nil disables their endpoints
	Timers    TimerService           // timers; nil disables their endpoints
	Schedules ScheduleService        // cron schedules; nil disables their endpoints
	Tasks     TaskService            // prioritized tasks and queues; nil disables their endpoints
	Secrets   SecretStore            // the key sealing page tokens, shared by every gateway; nil: this process's own
	Checks    []Check                // probed by /readyz: database, Temporal, message queue
	Gatherer  prometheus.Gatherer    // served at /metrics; nil serves the default registry
	Admission *metrics.Admission     // counts admission-control refusals; nil counts nothing
	Wake      func()                 // optional: nudge an in-process relay after a redrive
	Logger    *slog.Logger

	// The console's own reads (ConsoleConfig): nil leaves their sections out of its overview.
	Overview      OverviewStore // queue backlogs and the outbox summary of courier's database
	TimerOverview TimerOverview // timers per business type and the schedules, from Temporal
	Pauses        PauseService  // flow control: pause and resume (nil: no /v1/pauses, no buttons)
}

// Config tunes the gateway.
type Config struct {
	MaxBodyBytes int64 // request body limit; default 1 MiB (below Temporal's 2 MB payload limit)
	// RequestTimeout bounds the work behind one request (database, Temporal); a request that
	// takes longer is answered 503 unavailable. Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// KeyRate is the request rate of every API key without its own (docs/admission.md), per
	// gateway instance; the zero Rate (the default) is unlimited.
	KeyRate courier.Rate
	// Console configures the operators' console under /console (on by default).
	Console ConsoleConfig
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultRequestTimeout = 30 * time.Second
)

// New builds the HTTP handler.
func New(cfg Config, d Deps) *echo.Echo {
	defaults.UnlessPositive(&cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	defaults.UnlessPositive(&cfg.RequestTimeout, DefaultRequestTimeout)
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Gatherer == nil {
		d.Gatherer = prometheus.DefaultGatherer
	}
	adm := newAdmission(cfg.KeyRate, nil, d.Admission)
	d = adm.wrap(d)
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Use(traceRequests) // first: its span covers everything else, a recovered panic included
	e.Use(middleware.Recover())
	e.Use(deadline(cfg.RequestTimeout))
	e.Use(wellFormedQuery)
	e.Use(bodyLimit(cfg.MaxBodyBytes))

	h := &handlers{d: d, pages: &pageTokens{secrets: d.Secrets}}
	var view *consoleView
	if !cfg.Console.Disabled {
		con := newConsole(cfg.Console, h, adm)
		con.mount(e)
		view = con.view
	}
	e.HTTPErrorHandler = errorHandler(d.Logger, view)
	e.GET("/healthz", h.healthz)
	e.GET("/readyz", h.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{})))
	e.GET("/openapi.yaml", serveOpenAPI)

	v1 := e.Group("/v1")
	producer := requireScope(d.Keys, adm, apikey.ScopeProducer)
	admin := requireScope(d.Keys, adm, apikey.ScopeAdmin)
	v1.POST("/outbox", h.publishOutbox, producer)
	v1.GET("/outbox", h.listOutbox, producer)
	v1.GET("/outbox/:id", h.getOutbox, producer)
	v1.POST("/outbox/:id/redrive", h.redriveOutbox, admin)
	v1.POST("/outbox/redrive", h.redriveDeadOutbox, admin)
	v1.GET("/outbox/blocked-keys", h.listBlockedKeys, producer)
	v1.POST("/outbox/:id/skip", h.skipOutbox, admin)
	if d.BizTypes != nil {
		v1.GET("/biz-types", h.listBizTypes, admin)
		v1.GET("/biz-types/:name", h.getBizType, admin)
		v1.PUT("/biz-types/:name", h.putBizType, admin)
		v1.DELETE("/biz-types/:name", h.deleteBizType, admin)
	}
	if d.Timers != nil {
		v1.POST("/timers", h.createTimer, producer)
		v1.GET("/timers", h.listTimers, producer)
		v1.GET("/timers/:biz_type/:biz_id", h.getTimer, producer)
		v1.PATCH("/timers/:biz_type/:biz_id", h.rescheduleTimer, producer)
		v1.DELETE("/timers/:biz_type/:biz_id", h.cancelTimer, producer)
		v1.POST("/timers/batch", h.createTimers, producer)
		v1.POST("/timers/:biz_type/:biz_id/redeliver", h.redeliverTimer, admin)
		v1.POST("/timers/redeliver", h.redeliverTimers, admin)
	}
	if d.Tasks != nil {
		workerScope := requireScope(d.Keys, adm, apikey.ScopeWorker)
		v1.POST("/tasks", h.insertTask, producer)
		v1.GET("/tasks", h.listTasks, producer)
		v1.GET("/tasks/:task_id", h.getLatestTask, producer)
		v1.GET("/tasks/:task_id/versions/:version", h.getTask, producer)
		v1.DELETE("/tasks/:task_id/versions/:version", h.cancelTask, producer)
		v1.POST("/tasks/:task_id/versions/:version/retry", h.retryTask, producer)
		v1.POST("/tasks/bulk/cancel", h.cancelTasks, admin)
		v1.POST("/tasks/bulk/retry", h.retryTasks, admin)
		v1.POST("/tasks/:task_id/versions/:version/result", h.taskResult, workerScope)
		v1.POST("/tasks/results", h.taskResults, workerScope)
		v1.POST("/tasks/:task_id/versions/:version/heartbeat", h.taskHeartbeat, workerScope)
		v1.GET("/queues", h.listQueues, admin)
		v1.GET("/queues/:name", h.getQueue, admin)
		v1.PUT("/queues/:name", h.putQueue, admin)
		v1.DELETE("/queues/:name", h.deleteQueue, admin)
	}
	if d.Pauses != nil {
		v1.GET("/pauses", h.listPauses, admin)
		v1.POST("/pauses", h.pause, admin)
		v1.DELETE("/pauses/:kind/:name", h.resume, admin)
	}
	if d.Schedules != nil {
		sc := d.Schedules
		v1.GET("/schedules", h.listSchedules, producer)
		v1.PUT("/schedules/:id", h.putSchedule, producer)
		v1.GET("/schedules/:id", h.getSchedule, producer)
		v1.DELETE("/schedules/:id", h.deleteSchedule, producer)
		v1.POST("/schedules/:id/pause", h.scheduleAction(sc.PauseSchedule), producer)
		v1.POST("/schedules/:id/unpause", h.scheduleAction(sc.UnpauseSchedule), producer)
		v1.POST("/schedules/:id/trigger", h.scheduleAction(func(ctx context.Context, id, _ string) error {
			return sc.TriggerSchedule(ctx, id)
		}), producer)
	}
	return e
}

// bodyLimit refuses bodies over max before any handler reads them: by Content-Length when
// given, and by a capped reader otherwise.
func bodyLimit(max int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if req.ContentLength > max {
				return &courier.Error{Code: courier.CodeTooLarge,
					Message: "request body is larger than the limit",
					Details: map[string]any{"limit_bytes": max}}
			}
			req.Body = http.MaxBytesReader(c.Response(), req.Body, max)
			return next(c)
		}
	}
}

// deadline bounds the work behind each request: nothing waits forever on a database or on
// Temporal (a timer update with no worker running, say). The error handler answers a request
// that ran out of time with 503 unavailable.
func deadline(d time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, cancel := context.WithTimeout(c.Request().Context(), d)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
}

// wellFormedQuery refuses a query string that does not parse (a stray '%', say): echo would
// silently read its parameters as absent.
func wellFormedQuery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, err := url.ParseQuery(c.Request().URL.RawQuery); err != nil {
			return courier.Errorf(courier.CodeInvalid, "the query string is malformed: %v", err)
		}
		return next(c)
	}
}

type handlers struct {
	d     Deps
	pages *pageTokens // seals the page tokens of lists paged by Temporal (timers)
}

func (h *handlers) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handlers) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), health.ProbeTimeout)
	defer cancel()
	rep := health.Evaluate(ctx, h.d.Checks)
	for _, chk := range h.d.Checks {
		if err := rep.Errors[chk.Name]; err != nil {
			// Anyone may call /readyz: say which dependency is down, keep the error (which
			// may name hosts and users) for the log.
			h.d.Logger.Warn("readiness check failed", "dependency", chk.Name, "error", err)
		}
	}
	status := http.StatusOK
	if !rep.Ready {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"ready": rep.Ready, "checks": rep.Checks}
	// What an operator paused is not a fault (the service is ready), but whoever reads this to
	// see why work is not flowing should find it here.
	if h.d.Pauses != nil {
		if list, err := h.d.Pauses.List(ctx); err == nil {
			paused := make([]string, len(list))
			for i, p := range list {
				paused[i] = string(p.Kind) + ":" + p.Name
			}
			body["paused"] = paused
		}
	}
	return c.JSON(status, body)
}
