package gateway

import (
	"context"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/timers"
)

// The operators' console: server-rendered pages under /console over the same services and
// stores the API uses (docs/operations.md#the-console). Any valid API key signs in and reads;
// actions (redrive, cancel, pause) need the admin scope, are POSTs only, and carry a CSRF token.

// ConsoleConfig configures the console.
type ConsoleConfig struct {
	// Disabled turns the console off; its routes are then not served. Default: on.
	Disabled bool
	// TemporalUIURL is the Temporal Web UI's address (COURIER_TEMPORAL_UI_URL; courier dev: its
	// embedded UI); each item links to its workflow there. Empty: no links.
	TemporalUIURL string
	// Namespace is the Temporal namespace the links open; default "default".
	Namespace string
	// SessionTTL is how long a sign-in lasts; default DefaultConsoleSessionTTL.
	SessionTTL time.Duration
}

// OverviewStore is what the console's overview reads from courier's database beyond the API's
// services (store.Store). A producer's outbox database (Deps.Sources) shows in the overview
// when its OutboxStore also has OutboxOverview.
type OverviewStore interface {
	QueueBacklogs(ctx context.Context, since time.Time) ([]courier.QueueBacklog, error)
	OutboxOverview(ctx context.Context, topics int) (courier.OutboxOverview, error)
}

// outboxOverviewer is an OutboxStore that can summarise its table.
type outboxOverviewer interface {
	OutboxOverview(ctx context.Context, topics int) (courier.OutboxOverview, error)
}

// TimerOverview is what the console's overview reads about timers and schedules from Temporal
// (timers.Service).
type TimerOverview interface {
	TimerStats(ctx context.Context, bizTypes []string, now time.Time, horizon, grace time.Duration) ([]timers.TypeStats, error)
	ListSchedules(ctx context.Context, limit int) ([]api.Schedule, bool, error)
}

// console serves the console's pages; h gives it the API's handlers and services.
type console struct {
	h      *handlers
	cfg    ConsoleConfig
	adm    *admission
	keys   *sessionKeys
	view   *consoleView
	log    *slog.Logger
	now    func() time.Time
	flow   PauseService
	stats  OverviewStore
	timers TimerOverview
}

func newConsole(cfg ConsoleConfig, h *handlers, adm *admission) *console {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultConsoleSessionTTL
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	cfg.TemporalUIURL = strings.TrimRight(cfg.TemporalUIURL, "/")
	return &console{h: h, cfg: cfg, adm: adm, keys: &sessionKeys{secrets: h.d.Secrets}, log: h.d.Logger, now: time.Now,
		view: newConsoleView(cfg, h.d.Tasks != nil, h.d.Timers != nil), flow: h.d.Pauses, stats: h.d.Overview, timers: h.d.TimerOverview}
}

// mount registers the console's routes. Reads need a session; actions need a session, its CSRF
// token and the admin scope. Routes of services the gateway was built without are left out,
// like the API's.
func (cs *console) mount(e *echo.Echo) {
	read := []echo.MiddlewareFunc{cs.headers, cs.session}
	act := []echo.MiddlewareFunc{cs.headers, cs.session, cs.checkCSRF, cs.requireAdmin}
	e.GET("/console/static/:name", cs.static)
	e.GET("/console/login", cs.loginPage, cs.headers)
	e.POST("/console/login", cs.login, cs.headers)
	e.POST("/console/logout", cs.logout, cs.headers, cs.session, cs.checkCSRF)
	e.GET("/console", cs.overview, read...)

	e.GET("/console/outbox", cs.outboxList, read...)
	e.GET("/console/outbox/:id", cs.outboxRecord, read...)
	e.POST("/console/outbox/:id/redrive", cs.redriveRecord, act...)
	e.POST("/console/outbox/redrive", cs.redriveDead, act...)
	e.POST("/console/outbox/:id/skip", cs.skipRecord, act...)
	if cs.h.d.Tasks != nil {
		e.GET("/console/tasks", cs.taskList, read...)
		e.GET("/console/tasks/:task_id/versions/:version", cs.taskDetail, read...)
		e.POST("/console/tasks/:task_id/versions/:version/cancel", cs.cancelTask, act...)
		e.POST("/console/tasks/bulk/cancel", cs.bulkTasks(false), act...)
		e.POST("/console/tasks/bulk/retry", cs.bulkTasks(true), act...)
	}
	if cs.h.d.Timers != nil {
		e.GET("/console/timers", cs.timerList, read...)
		e.GET("/console/timers/:biz_type/:biz_id", cs.timerDetail, read...)
		e.POST("/console/timers/:biz_type/:biz_id/cancel", cs.cancelTimer, act...)
		e.POST("/console/timers/:biz_type/:biz_id/redeliver", cs.redeliverTimer, act...)
		e.POST("/console/timers/redeliver", cs.redeliverFailed, act...)
	}
	if cs.h.d.Schedules != nil {
		e.POST("/console/schedules/:id/pause", cs.pauseSchedule, act...)
		e.POST("/console/schedules/:id/unpause", cs.unpauseSchedule, act...)
	}
	if cs.flow != nil {
		e.POST("/console/pause", cs.pause, act...)
		e.POST("/console/resume", cs.resume, act...)
	}
}

// isConsole says whether a request is the console's: its errors are pages, not JSON.
func isConsole(c echo.Context) bool {
	p := c.Request().URL.Path
	return p == "/console" || strings.HasPrefix(p, "/console/")
}

// headers sets the console's security headers: no script, style or image from anywhere but the
// console itself (it has no script at all), no framing, no caching, no referrer outside it.
func (cs *console) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		setConsoleHeaders(c.Response().Header())
		return next(c)
	}
}

func setConsoleHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make browsers send "Origin: null" on the console's own forms
	h.Set("Cache-Control", "no-store")
}

const consoleViewerKey = "courier.console.viewer"

// consoleViewer is who is signed in.
type consoleViewer struct {
	Key   apikey.Key
	Admin bool   // may act; otherwise read-only
	CSRF  string // the token every form of this session carries
}

// Role is how the page names the viewer's rights.
func (v *consoleViewer) Role() string {
	if v.Admin {
		return "admin"
	}
	return "read-only"
}

func viewerOf(c echo.Context) *consoleViewer {
	v, _ := c.Get(consoleViewerKey).(*consoleViewer)
	return v
}

// session admits requests with a valid session: a cookie this gateway fleet sealed, not
// expired, for an API key that is still valid (and within its request rate). Without one, a
// page request is sent to the sign-in page and an action is refused (401).
func (cs *console) session(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		v, err := cs.viewer(c)
		if err != nil {
			return err
		}
		if v == nil {
			c.SetCookie(consoleCookieOf(c, consoleCookie, "", "/console", -1))
			if m := c.Request().Method; m == http.MethodGet || m == http.MethodHead {
				return c.Redirect(http.StatusSeeOther, "/console/login")
			}
			return courier.Errorf(courier.CodeUnauthenticated, "sign in to the console first")
		}
		c.Set(consoleViewerKey, v)
		return next(c)
	}
}

// viewer reads the request's session; nil when it has none that holds.
func (cs *console) viewer(c echo.Context) (*consoleViewer, error) {
	ck, err := c.Cookie(consoleCookie)
	if err != nil || ck.Value == "" {
		return nil, nil
	}
	ctx := c.Request().Context()
	s, err := cs.keys.open(ctx, ck.Value)
	if errors.Is(err, errNoSession) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if age := cs.now().Sub(time.Unix(s.IssuedAt, 0)); age < 0 || age > cs.cfg.SessionTTL {
		return nil, nil
	}
	key, err := cs.h.d.Keys.LookupAPIKey(ctx, s.Token)
	if courier.ErrorCode(err) == courier.CodeUnauthenticated {
		return nil, nil // revoked since
	}
	if err != nil {
		return nil, err
	}
	if !key.Allows(consoleReadScope) {
		return nil, nil // signed in before the rule: read as signed out
	}
	if err := cs.adm.admitKey(key); err != nil {
		return nil, err
	}
	token, err := cs.keys.csrf(ctx, "session", s.Nonce)
	if err != nil {
		return nil, err
	}
	return &consoleViewer{Key: key, Admin: key.Allows(apikey.ScopeAdmin), CSRF: token}, nil
}

// checkCSRF refuses an action whose form lacks the session's CSRF token or that comes from
// another site (SameSite=Strict already keeps the cookie from cross-site requests; this holds
// without it).
func (cs *console) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := parseForm(c); err != nil {
			return err
		}
		if err := sameOrigin(c); err != nil {
			return err
		}
		if !sameToken(c.Request().PostForm.Get("csrf"), viewerOf(c).CSRF) {
			return courier.Errorf(courier.CodePermissionDenied, "the form's CSRF token is missing or stale: reload the page and try again")
		}
		return next(c)
	}
}

// consoleReadScope is what a key needs to sign in to the console and read it: the scope the
// API's reads of outbox records, tasks and timers need. A worker key (results and heartbeats
// only) cannot; actions need admin (requireAdmin).
const consoleReadScope = apikey.ScopeProducer

// requireAdmin refuses an action to a read-only session.
func (cs *console) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		v := viewerOf(c)
		if !v.Admin {
			return courier.Errorf(courier.CodePermissionDenied, "API key %s is read-only here: actions need the admin scope", v.Key.ID)
		}
		return next(c)
	}
}

// parseForm reads an action's form body: application/x-www-form-urlencoded only (or no body),
// within the body limit.
func parseForm(c echo.Context) error {
	req := c.Request()
	if ct := req.Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != echo.MIMEApplicationForm {
			return &courier.Error{Code: courier.CodeUnsupportedMedia, Message: "send the form as application/x-www-form-urlencoded"}
		}
	} else if req.ContentLength > 0 {
		return &courier.Error{Code: courier.CodeUnsupportedMedia, Message: "send the form as application/x-www-form-urlencoded"}
	}
	if err := req.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &courier.Error{Code: courier.CodeTooLarge, Message: "request body is larger than the limit",
				Details: map[string]any{"limit_bytes": mbe.Limit}}
		}
		return courier.Errorf(courier.CodeInvalid, "the form is malformed")
	}
	return nil
}

// sameOrigin refuses a request a browser says comes from another site: its Sec-Fetch-Site, or
// an Origin whose host is neither the request's Host nor, behind a proxy that rewrites Host,
// its X-Forwarded-Host (a page on another site cannot set that header on a form it posts).
func sameOrigin(c echo.Context) error {
	req := c.Request()
	refused := courier.Errorf(courier.CodePermissionDenied, "console actions come from the console's own pages only")
	if site := req.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return refused
	}
	if o := req.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" {
			return refused
		}
		if u.Host != req.Host && u.Host != req.Header.Get("X-Forwarded-Host") {
			return refused
		}
	}
	return nil
}

func (cs *console) loginPage(c echo.Context) error {
	if v, err := cs.viewer(c); err == nil && v != nil {
		return c.Redirect(http.StatusSeeOther, "/console")
	}
	return cs.loginForm(c, http.StatusOK, "")
}

// loginForm renders the sign-in form with a fresh CSRF nonce in its own short-lived cookie.
func (cs *console) loginForm(c echo.Context, status int, problem string) error {
	nonce, err := randomNonce()
	if err != nil {
		return err
	}
	token, err := cs.keys.csrf(c.Request().Context(), "login", nonce)
	if err != nil {
		return err
	}
	c.SetCookie(consoleCookieOf(c, consoleLoginCookie, nonce, "/console/login", loginFormTTL))
	code := courier.CodeUnauthenticated
	if status == http.StatusForbidden {
		code = courier.CodePermissionDenied
	}
	return cs.view.render(c, status, "login", consolePage{Title: "Sign in", CSRF: token, Problem: problem, ProblemCode: code})
}

// login signs in with an API key: a key that may read (consoleReadScope) reads, an admin key
// may act.
func (cs *console) login(c echo.Context) error {
	if err := parseForm(c); err != nil {
		return err
	}
	if err := sameOrigin(c); err != nil {
		return err
	}
	ctx := c.Request().Context()
	ck, err := c.Cookie(consoleLoginCookie)
	if err != nil || ck.Value == "" {
		return courier.Errorf(courier.CodePermissionDenied, "the sign-in form has expired: reload it")
	}
	want, err := cs.keys.csrf(ctx, "login", ck.Value)
	if err != nil {
		return err
	}
	if !sameToken(c.Request().PostForm.Get("csrf"), want) {
		return courier.Errorf(courier.CodePermissionDenied, "the sign-in form has expired: reload it")
	}
	token := strings.TrimSpace(c.Request().PostForm.Get("key"))
	if token == "" || len(token) > 256 {
		return cs.loginForm(c, http.StatusUnauthorized, "Enter an API key.")
	}
	key, err := cs.h.d.Keys.LookupAPIKey(ctx, token)
	if courier.ErrorCode(err) == courier.CodeUnauthenticated {
		return cs.loginForm(c, http.StatusUnauthorized, "That API key is unknown or revoked.")
	}
	if err != nil {
		return err
	}
	if !key.Allows(consoleReadScope) {
		cs.log.InfoContext(ctx, "console sign-in refused: the key may not read", "key_id", key.ID)
		return cs.loginForm(c, http.StatusForbidden, "That API key may not read the console: it needs the producer scope, as the API's reads do (or admin).")
	}
	if err := cs.adm.admitKey(key); err != nil {
		return err
	}
	nonce, err := randomNonce()
	if err != nil {
		return err
	}
	sealed, err := cs.keys.seal(ctx, consoleSession{V: 1, Token: token, IssuedAt: cs.now().Unix(), Nonce: nonce})
	if err != nil {
		return err
	}
	c.SetCookie(consoleCookieOf(c, consoleCookie, sealed, "/console", cs.cfg.SessionTTL))
	c.SetCookie(consoleCookieOf(c, consoleLoginCookie, "", "/console/login", -1))
	cs.log.InfoContext(ctx, "console sign-in", "key_id", key.ID, "admin", key.Allows(apikey.ScopeAdmin))
	return c.Redirect(http.StatusSeeOther, "/console")
}

func (cs *console) logout(c echo.Context) error {
	c.SetCookie(consoleCookieOf(c, consoleCookie, "", "/console", -1))
	return c.Redirect(http.StatusSeeOther, "/console/login")
}

func (cs *console) static(c echo.Context) error {
	b, ctype, ok := consoleStatic(c.Param("name"))
	if !ok {
		return courier.Errorf(courier.CodeNotFound, "no such file")
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=3600")
	c.Response().Header().Set("X-Content-Type-Options", "nosniff")
	return c.Blob(http.StatusOK, ctype, b)
}
