package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/pauses"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/timers"
)

// consoleFixture is a gateway with the console over a real SQLite store (no Temporal: the
// timer and schedule sections are left out).
type consoleFixture struct {
	url                         string
	st                          *store.Store
	admin, producer, revokedKey string
	revokedID                   string
	timers                      *failedTimers
}

// newConsoleFixture builds the fixture; slots wires fakes into the places the console keeps for
// services courier does not have yet (flow control) and a timer service whose timers all failed.
func newConsoleFixture(t *testing.T, slots bool) *consoleFixture {
	t.Helper()
	st, _ := testenv.Store(t, "sqlite")
	ctx := t.Context()
	f := &consoleFixture{st: st}
	_, f.admin, _ = mustKey(t, st, apikey.ScopeAdmin)
	_, f.producer, _ = mustKey(t, st, apikey.ScopeProducer)
	var k apikey.Key
	k, f.revokedKey, _ = mustKey(t, st, apikey.ScopeAdmin)
	f.revokedID = k.ID
	_, _, err := st.PutQueue(ctx, courier.Queue{Name: "docs", ConcurrencyLimit: 4}.WithDefaults())
	require.NoError(t, err)
	deps := gateway.Deps{Logger: slog.New(slog.DiscardHandler), Keys: st, Outbox: st, BizTypes: st, Overview: st, Secrets: st, Gatherer: prometheus.NewRegistry(),
		Tasks:  tasks.NewService(st, nil, "default", nil, nil, nil),
		Checks: []gateway.Check{{Name: "database", Probe: st.Ping}, {Name: "mq:default", Optional: true, Probe: func(context.Context) error { return io.EOF }}}}
	if slots {
		f.timers = &failedTimers{}
		deps.Pauses, deps.Timers = pauses.NewService(st, slog.New(slog.DiscardHandler)), f.timers
	}
	srv := httptest.NewServer(gateway.New(gateway.Config{Console: gateway.ConsoleConfig{TemporalUIURL: "http://127.0.0.1:8233/", Namespace: "courier"}}, deps))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func mustKey(t *testing.T, st *store.Store, sc apikey.Scope) (apikey.Key, string, error) {
	k, tok, err := st.CreateAPIKey(t.Context(), "console-"+string(sc), []apikey.Scope{sc})
	require.NoError(t, err)
	return k, tok, err
}

// browser is a cookie-keeping client that does not follow redirects.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

func (f *consoleFixture) browser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, base: f.url, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type page struct {
	status int
	header http.Header
	body   string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (p page) csrf(t *testing.T) string {
	m := csrfField.FindStringSubmatch(p.body)
	require.NotNil(t, m, "the page has a CSRF field: %s", p.body)
	return m[1]
}

func (b *browser) do(method, path string, form url.Values, header ...string) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.client.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return page{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (b *browser) get(path string) page { return b.do(http.MethodGet, path, nil) }

// signIn signs in with key and returns the session's CSRF token.
func (b *browser) signIn(key string) string {
	b.t.Helper()
	login := b.get("/console/login")
	require.Equal(b.t, http.StatusOK, login.status)
	p := b.do(http.MethodPost, "/console/login", url.Values{"csrf": {login.csrf(b.t)}, "key": {key}})
	require.Equal(b.t, http.StatusSeeOther, p.status, p.body)
	require.Equal(b.t, "/console", p.header.Get("Location"))
	home := b.get("/console")
	require.Equal(b.t, http.StatusOK, home.status, home.body)
	return home.csrf(b.t)
}

func TestConsoleSignIn(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	b := f.browser(t)

	p := b.get("/console")
	require.Equal(t, http.StatusSeeOther, p.status, "no session: to the sign-in page")
	require.Equal(t, "/console/login", p.header.Get("Location"))
	p = b.get("/console/outbox")
	require.Equal(t, http.StatusSeeOther, p.status)

	login := b.get("/console/login")
	require.Equal(t, http.StatusOK, login.status)
	require.Contains(t, login.header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Equal(t, "DENY", login.header.Get("X-Frame-Options"))
	token := login.csrf(t)

	p = b.do(http.MethodPost, "/console/login", url.Values{"csrf": {"forged"}, "key": {f.admin}})
	require.Equal(t, http.StatusForbidden, p.status, "a sign-in without the form's token is refused")
	require.Contains(t, p.header.Get("Content-Type"), "text/html")
	require.Contains(t, p.body, `data-code="permission_denied"`)

	p = b.do(http.MethodPost, "/console/login", url.Values{"csrf": {token}, "key": {"ck_" + strings.Repeat("0", 40)}})
	require.Equal(t, http.StatusUnauthorized, p.status)
	require.Contains(t, p.body, "unknown or revoked")
	require.NotContains(t, p.header.Get("Set-Cookie"), "courier_console=")

	// A worker key reports results and heartbeats: it may not read what the console shows (the
	// API's reads need the producer scope), so it cannot sign in.
	_, workerKey, _ := mustKey(t, f.st, apikey.ScopeWorker)
	login = b.get("/console/login")
	p = b.do(http.MethodPost, "/console/login", url.Values{"csrf": {login.csrf(t)}, "key": {workerKey}})
	require.Equal(t, http.StatusForbidden, p.status)
	require.Contains(t, p.body, "producer scope")
	require.NotContains(t, p.header.Get("Set-Cookie"), "courier_console=")
	require.Equal(t, http.StatusSeeOther, b.get("/console").status, "still signed out")

	login = b.get("/console/login")
	p = b.do(http.MethodPost, "/console/login", url.Values{"csrf": {login.csrf(t)}, "key": {f.admin}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	var session *http.Cookie
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "courier_console" && c.Value != "" {
			session = c
		}
	}
	require.NotNil(t, session)
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	require.Equal(t, "/console", session.Path)
	require.False(t, session.Secure, "plain HTTP here")
	require.NotContains(t, session.Value, f.admin, "the key is sealed, not stored in the clear")

	home := b.get("/console")
	require.Equal(t, http.StatusOK, home.status)
	require.Contains(t, home.body, "admin")
	require.Equal(t, http.StatusSeeOther, b.get("/console/login").status, "signed in: the sign-in page sends on")

	// Over TLS (here, a proxy that says so) the cookie is Secure.
	tls := f.browser(t)
	login = tls.do(http.MethodGet, "/console/login", nil, "X-Forwarded-Proto", "https")
	require.Contains(t, login.header.Get("Set-Cookie"), "Secure")
	p = tls.do(http.MethodPost, "/console/login", url.Values{"csrf": {login.csrf(t)}, "key": {f.admin}}, "X-Forwarded-Proto", "https")
	require.Equal(t, http.StatusSeeOther, p.status)
	require.Contains(t, p.header.Get("Set-Cookie"), "Secure")

	// Sign out is a POST with the token; a GET is not an action.
	require.Equal(t, http.StatusMethodNotAllowed, b.get("/console/logout").status)
	p = b.do(http.MethodPost, "/console/logout", url.Values{"csrf": {home.csrf(t)}})
	require.Equal(t, http.StatusSeeOther, p.status)
	require.Equal(t, http.StatusSeeOther, b.get("/console").status, "signed out")
}

func TestConsoleRevokedKeyEndsItsSessions(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	b := f.browser(t)
	b.signIn(f.revokedKey)
	require.NoError(t, f.st.RevokeAPIKey(t.Context(), f.revokedID))
	p := b.get("/console")
	require.Equal(t, http.StatusSeeOther, p.status, "the key is looked up on every request")
	require.Equal(t, "/console/login", p.header.Get("Location"))
}

func TestConsoleShowsBacklogAndEscapesWhatProducersWrote(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	ctx := t.Context()
	for i, prio := range []int{1, 2, 2, 5} {
		_, _, err := f.st.InsertTask(ctx, courier.TaskRequest{TaskID: "doc-" + string(rune('a'+i)), Version: 1, Priority: prio, Queue: "docs",
			Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	const markup = `<script>document.title="pwned"</script><img src=x onerror=alert(1)>`
	rec, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "orders.created", Key: markup, Payload: []byte(`{"html":"` + strings.ReplaceAll(markup, `"`, `\"`) + `"}`),
		Headers: map[string]string{"X-Note": markup}})
	require.NoError(t, err)
	_, err = f.st.MarkOutboxDead(ctx, rec.ID, "broker said: "+markup)
	require.NoError(t, err)
	const idMarkup = `<script>alert(1)<img src=x onerror=alert(2)>` // ids take no '/'
	_, _, err = f.st.InsertTask(ctx, courier.TaskRequest{TaskID: idMarkup, Version: 1, Queue: "docs", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	b := f.browser(t)
	b.signIn(f.producer)
	home := b.get("/console")
	require.Equal(t, http.StatusOK, home.status)
	for _, want := range []string{`data-queue="docs"`, `data-band="1"`, `>1</a>`, `>2</a>`, `<td class="n total">5</td>`,
		`data-topic="orders.created"`, `data-check="mq:default"`, `badge down`} {
		require.Contains(t, home.body, want)
	}
	require.NotContains(t, home.body, "Pause", "no flow control: no pause buttons")
	require.NotContains(t, home.body, "Redrive all", "a read-only session gets no action buttons")

	for _, path := range []string{"/console/outbox?status=dead", "/console/outbox/" + idString(rec.ID), "/console/tasks?queue=docs",
		"/console/tasks/" + url.PathEscape(idMarkup) + "/versions/1"} {
		p := b.get(path)
		require.Equal(t, http.StatusOK, p.status, "%s: %s", path, p.body)
		require.NotContains(t, p.body, "<script>", path)
		require.NotContains(t, p.body, "<img", path)
		require.Contains(t, p.body, "&lt;script&gt;", "%s shows the markup as text", path)
	}
	list := b.get("/console/outbox?status=dead")
	require.Contains(t, list.body, `href="http://127.0.0.1:8233/namespaces/courier/workflows/outbox%2F`+idString(rec.ID)+`"`, "each item links to its workflow")
}

// The queue lines show each queue's dispatch mode, and a batched push's size.
func TestConsoleShowsTheDispatchMode(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	ctx := t.Context()
	_, _, err := f.st.PutQueue(ctx, courier.Queue{Name: "bulk", ConcurrencyLimit: 50, DispatchMode: courier.DispatchBatched, PushBatchSize: 25}.WithDefaults())
	require.NoError(t, err)
	_, _, err = f.st.PutQueue(ctx, courier.Queue{Name: "bulk1", ConcurrencyLimit: 50, DispatchMode: courier.DispatchBatched}.WithDefaults())
	require.NoError(t, err)
	for _, q := range []string{"docs", "bulk", "bulk1"} {
		_, _, err := f.st.InsertTask(ctx, courier.TaskRequest{TaskID: "t-" + q, Version: 1, Priority: 3, Queue: q, Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	b := f.browser(t)
	b.signIn(f.producer)
	home := b.get("/console")
	require.Equal(t, http.StatusOK, home.status)
	require.Regexp(t, `data-queue="docs">[^\n]*\n[^\n]*\n\s*<td class="mode" data-mode="per-attempt">per-attempt</td>`, home.body)
	require.Regexp(t, `data-queue="bulk">[^\n]*\n[^\n]*\n\s*<td class="mode" data-mode="batched">batched<span class="muted">, 25 per push</span></td>`, home.body)
	require.Regexp(t, `data-queue="bulk1">[^\n]*\n[^\n]*\n\s*<td class="mode" data-mode="batched">batched</td>`, home.body, "one attempt per push: no size")
}

func TestConsoleActions(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	ctx := t.Context()
	var dead []int64
	for _, topic := range []string{"orders.created", "orders.paid", "orders.paid", "users.created"} {
		rec, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: topic, Payload: []byte(`{}`)})
		require.NoError(t, err)
		_, err = f.st.MarkOutboxDead(ctx, rec.ID, "no stream")
		require.NoError(t, err)
		dead = append(dead, rec.ID)
	}
	_, _, err := f.st.InsertTask(ctx, courier.TaskRequest{TaskID: "t-1", Version: 1, Queue: "docs", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	status := func(id int64) courier.OutboxStatus {
		rec, err := f.st.GetOutbox(ctx, id)
		require.NoError(t, err)
		return rec.Status
	}
	redrive := "/console/outbox/" + idString(dead[0]) + "/redrive"

	reader := f.browser(t)
	readCSRF := reader.signIn(f.producer)
	p := reader.do(http.MethodPost, redrive, url.Values{"csrf": {readCSRF}})
	require.Equal(t, http.StatusForbidden, p.status, "read-only sessions may not act")
	require.Contains(t, p.body, "admin scope")

	admin := f.browser(t)
	csrf := admin.signIn(f.admin)
	require.Equal(t, http.StatusMethodNotAllowed, admin.get(redrive).status, "no action by GET")
	p = admin.do(http.MethodPost, redrive, url.Values{})
	require.Equal(t, http.StatusForbidden, p.status, "no token")
	p = admin.do(http.MethodPost, redrive, url.Values{"csrf": {readCSRF}})
	require.Equal(t, http.StatusForbidden, p.status, "another session's token")
	p = admin.do(http.MethodPost, redrive, url.Values{"csrf": {csrf}}, "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, p.status, "another site")
	p = admin.do(http.MethodPost, redrive, url.Values{"csrf": {csrf}}, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, p.status, "another site, as the browser says")
	require.Equal(t, courier.OutboxDead, status(dead[0]), "nothing refused changed anything")

	p = admin.do(http.MethodPost, redrive, url.Values{"csrf": {csrf}}, "Origin", "null")
	require.Equal(t, http.StatusForbidden, p.status, "an opaque origin")
	p = admin.do(http.MethodPost, redrive, url.Values{"csrf": {csrf}}, "Origin", f.url)
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, courier.OutboxPending, status(dead[0]))
	shown := admin.get(p.header.Get("Location"))
	require.Contains(t, shown.body, "Redriven")
	require.Contains(t, shown.body, `id="record-status">pending`)

	p = admin.do(http.MethodPost, "/console/outbox/redrive", url.Values{"csrf": {csrf}, "topic": {"orders.>"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.status, "a bulk redrive needs its confirmation")
	p = admin.do(http.MethodPost, "/console/outbox/redrive", url.Values{"csrf": {csrf}, "topic": {"orders.$x"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusBadRequest, p.status, "the API's validation: %s", p.body)
	p = admin.do(http.MethodPost, "/console/outbox/redrive", url.Values{"csrf": {csrf}, "topic": {"orders.>"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Contains(t, admin.get(p.header.Get("Location")).body, "Redrove 2 dead records.")
	require.Equal(t, courier.OutboxDead, status(dead[3]), "users.created does not match orders.>")

	cancel := "/console/tasks/t-1/versions/1/cancel"
	p = admin.do(http.MethodPost, cancel, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Contains(t, admin.get(p.header.Get("Location")).body, `id="task-status">cancelled`)

	p = admin.get("/console/outbox/999999")
	require.Equal(t, http.StatusNotFound, p.status)
	require.Contains(t, p.header.Get("Content-Type"), "text/html", "the console's errors are pages")
	require.Contains(t, p.body, `data-code="not_found"`)
	p = admin.do(http.MethodPost, "/console/outbox/redrive", nil, "Content-Type", "application/json")
	require.Equal(t, http.StatusUnsupportedMediaType, p.status)
}

// With flow control (Deps.Pauses), queues, business types and topic patterns show whether they
// are paused, with the reason and who paused them, and admins pause and resume them.
func TestConsolePause(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, true)
	b := f.browser(t)
	csrf := b.signIn(f.admin)
	home := b.get("/console")
	require.Contains(t, home.body, `<span class="badge ok">running</span>`)
	require.Contains(t, home.body, "Nothing is paused.")
	p := b.do(http.MethodPost, "/console/pause", url.Values{"csrf": {csrf}, "kind": {"queue"}, "name": {"docs"}, "reason": {"db maintenance"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	list, err := f.st.ListPauses(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, courier.PauseQueue, list[0].Kind)
	require.Equal(t, "docs", list[0].Name)
	require.Equal(t, "db maintenance", list[0].Reason)
	require.Contains(t, list[0].PausedBy, "console, api key console-admin")
	home = b.get(p.header.Get("Location"))
	require.Contains(t, home.body, "Paused.")
	require.Regexp(t, `data-queue="docs">[\s\S]*?badge paused`, home.body)

	p = b.do(http.MethodPost, "/console/pause", url.Values{"csrf": {csrf}, "kind": {"topic"}, "name": {"orders.>"}, "reason": {"<b>broker</b> move"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	home = b.get("/console")
	require.Contains(t, home.body, `data-pause="topic/orders.&gt;"`)
	require.Contains(t, home.body, "&lt;b&gt;broker&lt;/b&gt; move", "the reason is shown as text")
	require.NotContains(t, home.body, "Nothing is paused.")

	p = b.do(http.MethodPost, "/console/pause", url.Values{"csrf": {csrf}, "kind": {"nope"}, "name": {"docs"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.status)
	p = b.do(http.MethodPost, "/console/pause", url.Values{"csrf": {csrf}, "kind": {"topic"}, "name": {"orders.$x"}})
	require.Equal(t, http.StatusBadRequest, p.status)
	p = b.do(http.MethodPost, "/console/resume", url.Values{"csrf": {csrf}, "kind": {"topic"}, "name": {"orders.>"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	p = b.do(http.MethodPost, "/console/resume", url.Values{"csrf": {csrf}, "kind": {"topic"}, "name": {"orders.>"}})
	require.Equal(t, http.StatusNotFound, p.status, "not paused any more")
	p = b.do(http.MethodPost, "/console/resume", url.Values{"csrf": {csrf}, "kind": {"queue"}, "name": {"docs"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	list, err = f.st.ListPauses(t.Context())
	require.NoError(t, err)
	require.Empty(t, list)
}

func idString(id int64) string { return strconv.FormatInt(id, 10) }

// failedTimers answers every timer as failed and records the redeliveries asked of it.
type failedTimers struct {
	gateway.TimerService
	mu    sync.Mutex
	one   []string
	types []string
}

func (*failedTimers) Get(_ context.Context, bizType, bizID string) (api.Timer, error) {
	return api.Timer{BizType: bizType, BizID: bizID, State: courier.TimerFailed, LastError: "callback answered 410",
		WorkflowID: courier.TimerWorkflowID(bizType, bizID)}, nil
}

func (f *failedTimers) Redeliver(_ context.Context, bizType, bizID string) (api.Timer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.one = append(f.one, bizType+"/"+bizID)
	return api.Timer{BizType: bizType, BizID: bizID, State: courier.TimerScheduled}, nil
}

func (f *failedTimers) RedeliverFailed(_ context.Context, q timers.RedeliverQuery) (timers.RedeliverResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.types = append(f.types, q.BizType)
	return timers.RedeliverResult{Redelivered: 3, More: q.Max == timers.MaxRedeliver}, nil
}

// With a timer service, a failed timer gets a Redeliver button, and a business type's failed
// timers are redelivered together, a page at a time (the flash says when more remain).
func TestConsoleRedeliverySlot(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, true)
	b := f.browser(t)
	csrf := b.signIn(f.admin)
	p := b.get("/console/timers/order.close/o-1")
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `action="/console/timers/order.close/o-1/redeliver"`)
	p = b.do(http.MethodPost, "/console/timers/order.close/o-1/redeliver", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, []string{"order.close/o-1"}, f.timers.one)
	require.Contains(t, b.get(p.header.Get("Location")).body, "Redelivered")

	p = b.do(http.MethodPost, "/console/timers/redeliver", url.Values{"csrf": {csrf}, "biz_type": {"order.close"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.status, "the bulk redelivery needs its confirmation")
	p = b.do(http.MethodPost, "/console/timers/redeliver", url.Values{"csrf": {csrf}, "biz_type": {"../x"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusBadRequest, p.status)
	p = b.do(http.MethodPost, "/console/timers/redeliver", url.Values{"csrf": {csrf}, "biz_type": {"order.close"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, []string{"order.close"}, f.timers.types)
	body := b.get(p.header.Get("Location")).body
	require.Contains(t, body, "Redelivered 3 failed timers.")
	require.Contains(t, body, "More failed timers match")

	plain := newConsoleFixture(t, false)
	pb := plain.browser(t)
	pcsrf := pb.signIn(plain.admin)
	p = pb.do(http.MethodPost, "/console/timers/redeliver", url.Values{"csrf": {pcsrf}, "biz_type": {"order.close"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusNotFound, p.status, "no timer service, no route")
}

// The task list's bulk form cancels and retries what its filter matches, like POST
// /v1/tasks/bulk/cancel and /retry, after a confirmation; a reader sees no form.
func TestConsoleBulkTasks(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c"} {
		_, _, err := f.st.InsertTask(ctx, courier.TaskRequest{TaskID: id, Version: 1, Queue: "docs", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	_, _, err := f.st.InsertTask(ctx, courier.TaskRequest{TaskID: "other", Version: 1, Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	statusOf := func(id string) courier.TaskStatus {
		tk, err := f.st.GetTask(ctx, id, 1)
		require.NoError(t, err)
		return tk.Status
	}

	reader := f.browser(t)
	reader.signIn(f.producer)
	require.NotContains(t, reader.get("/console/tasks?queue=docs").body, "/console/tasks/bulk/")

	admin := f.browser(t)
	csrf := admin.signIn(f.admin)
	list := admin.get("/console/tasks?queue=docs&status=pending")
	require.Contains(t, list.body, `action="/console/tasks/bulk/cancel"`)
	require.NotContains(t, list.body, `action="/console/tasks/bulk/retry"`, "pending tasks cannot be retried")

	form := url.Values{"csrf": {csrf}, "queue": {"docs"}, "status": {"pending"}, "priority": {""}, "created_after": {""}, "created_before": {""}, "max": {"2"}}
	p := admin.do(http.MethodPost, "/console/tasks/bulk/cancel", form)
	require.Equal(t, http.StatusUnprocessableEntity, p.status, "a bulk action needs its confirmation")
	form.Set("confirm", "yes")
	p = admin.do(http.MethodPost, "/console/tasks/bulk/cancel", form)
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Contains(t, admin.get(p.header.Get("Location")).body, "Cancelled 2 tasks. More tasks match")
	form.Set("max", "")
	p = admin.do(http.MethodPost, "/console/tasks/bulk/cancel", form)
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Contains(t, admin.get(p.header.Get("Location")).body, "Cancelled 1 tasks.")
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, courier.TaskCancelled, statusOf(id))
	}
	require.Equal(t, courier.TaskPending, statusOf("other"), "another queue is not matched")

	p = admin.do(http.MethodPost, "/console/tasks/bulk/retry", url.Values{"csrf": {csrf}, "queue": {"docs"}, "status": {"cancelled"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Contains(t, admin.get(p.header.Get("Location")).body, "Retried 3 tasks")
	require.Equal(t, courier.TaskPending, statusOf("a"))

	p = admin.do(http.MethodPost, "/console/tasks/bulk/retry", url.Values{"csrf": {csrf}, "status": {"pending"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.status, "the API's rules: %s", p.body)
	p = admin.do(http.MethodPost, "/console/tasks/bulk/cancel", url.Values{"csrf": {csrf}, "priority": {"x"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusBadRequest, p.status)
}

// The overview lists each source's blocked keys (the ordered mode) with the record each waits
// on, shown as text whatever the producer wrote; admins skip the record there, with the
// confirmation, through the API's code.
func TestConsoleBlockedKeys(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	ctx := t.Context()
	const markup = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	first, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "orders.created", Key: markup, Payload: []byte(`{}`)})
	require.NoError(t, err)
	for range 2 {
		_, err = f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "orders.paid", Key: markup, Payload: []byte(`{}`)})
		require.NoError(t, err)
	}
	blocked, err := f.st.BlockKey(ctx, first.ID, "broker said: "+markup)
	require.NoError(t, err)
	require.True(t, blocked)

	reader := f.browser(t)
	readCSRF := reader.signIn(f.producer)
	home := reader.get("/console")
	require.Equal(t, http.StatusOK, home.status)
	require.Contains(t, home.body, "Blocked keys")
	require.Contains(t, home.body, `href="/console/outbox/`+idString(first.ID)+`?source=default">`+idString(first.ID)+`</a>`, "the blocking record, linked")
	require.Contains(t, home.body, `<td class="n">2</td>`, "two records wait behind the key")
	require.Contains(t, home.body, "&lt;script&gt;alert(1)&lt;/script&gt;", "the key and reason as text")
	require.NotContains(t, home.body, "<script>")
	require.NotContains(t, home.body, "<img")
	require.NotContains(t, home.body, ">Skip<", "a read-only session gets no skip button")

	skip := "/console/outbox/" + idString(first.ID) + "/skip"
	p := reader.do(http.MethodPost, skip, url.Values{"csrf": {readCSRF}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, p.status, "read-only sessions may not skip")

	admin := f.browser(t)
	csrf := admin.signIn(f.admin)
	home = admin.get("/console")
	require.Contains(t, home.body, `action="/console/outbox/`+idString(first.ID)+`/skip?source=default"`)
	require.Contains(t, home.body, ">Skip<")
	p = admin.do(http.MethodPost, skip, url.Values{})
	require.Equal(t, http.StatusForbidden, p.status, "no token")
	p = admin.do(http.MethodPost, skip, url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusUnprocessableEntity, p.status, "a skip needs its confirmation")
	n, err := f.st.CountBlockedKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "nothing refused changed anything")

	p = admin.do(http.MethodPost, skip+"?source=default", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	home = admin.get(p.header.Get("Location"))
	require.Contains(t, home.body, "Skipped")
	require.NotContains(t, home.body, "Blocked keys", "no key is blocked any more")
	n, err = f.st.CountBlockedKeys(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	rec, err := f.st.GetOutbox(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, courier.OutboxDead, rec.Status, "a skipped record stays dead")

	p = admin.do(http.MethodPost, skip, url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	require.Equal(t, http.StatusConflict, p.status, "the API's answer: the record blocks no key")
	require.Contains(t, p.body, `data-code="conflict"`)
	p = admin.do(http.MethodPost, "/console/outbox/999999/skip", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	require.Equal(t, http.StatusNotFound, p.status)
}

// A record's page and its row in the list link the workflow that took it: its batch's (batch
// mode), its key's (ordered mode) or its own; a record no workflow has taken yet links none and
// says so.
func TestConsoleLinksTheRecordsRun(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, false)
	ctx := t.Context()
	var ids []int64
	for _, key := range []string{"", "", "o-1"} {
		rec, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "orders.created", Key: key, Payload: []byte(`{}`)})
		require.NoError(t, err)
		ids = append(ids, rec.ID)
	}
	waiting, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "orders.paid", Payload: []byte(`{}`)})
	require.NoError(t, err)
	// What the relay does: its claim hands the first two to a batch, the key's run claims the third.
	_, err = f.st.ClaimOutboxWhere(ctx, 2, time.Minute, store.ClaimFilter{Ordered: courier.OrderedScope{All: true}})
	require.NoError(t, err)
	batch := courier.OutboxBatchWorkflowID("", ids[0], ids[1])
	require.NoError(t, f.st.AssignOutboxRun(ctx, ids[:2], batch))
	key := courier.OutboxKeyWorkflowID("", "o-1")
	_, err = f.st.ClaimOrdered(ctx, "o-1", key, courier.OrderedScope{All: true}, 10, time.Minute, nil)
	require.NoError(t, err)

	b := f.browser(t)
	b.signIn(f.producer)
	ui := "http://127.0.0.1:8233/namespaces/courier/workflows/"
	for id, wid := range map[int64]string{ids[0]: batch, ids[2]: key} {
		p := b.get("/console/outbox/" + idString(id))
		require.Equal(t, http.StatusOK, p.status)
		require.Contains(t, p.body, `<code id="record-workflow">`+wid+`</code>`)
		require.Contains(t, p.body, `href="`+ui+url.PathEscape(wid)+`"`)
	}
	p := b.get("/console/outbox/" + idString(waiting.ID))
	require.Contains(t, p.body, "none yet: no workflow has taken it")
	require.NotContains(t, p.body, ui, "no link to a workflow that does not exist")
	list := b.get("/console/outbox")
	require.Contains(t, list.body, `href="`+ui+url.PathEscape(batch)+`"`)
	require.Contains(t, list.body, `href="`+ui+url.PathEscape(key)+`"`)
	require.NotContains(t, list.body, ui+url.PathEscape(courier.OutboxWorkflowID("", waiting.ID)))
}
