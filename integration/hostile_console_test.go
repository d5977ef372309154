package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
)

// The console's routes in the hostile-input and auth tests (hostile_api_test.go). The console
// signs in with a cookie, not a Bearer key, answers errors with pages rather than JSON, and
// acts on forms that carry a CSRF token; otherwise the rules are the API's: no 5xx, a refused
// request writes nothing, and nothing a request sends comes back as markup.

// Who may call each console route: "" anyone, consoleReader any signed-in key (a key with the
// producer scope, or admin: a worker key cannot sign in), and apikey.ScopeAdmin a signed-in
// admin key with the session's CSRF token.
const consoleReader apikey.Scope = "console-session"

var consoleRoutes = map[string]apikey.Scope{
	"GET /console/static/:name": "",
	"GET /console/login":        "",
	"POST /console/login":       "",
	"POST /console/logout":      consoleReader,

	"GET /console":                                  consoleReader,
	"GET /console/outbox":                           consoleReader,
	"GET /console/outbox/:id":                       consoleReader,
	"GET /console/tasks":                            consoleReader,
	"GET /console/tasks/:task_id/versions/:version": consoleReader,
	"GET /console/timers":                           consoleReader,
	"GET /console/timers/:biz_type/:biz_id":         consoleReader,

	"POST /console/outbox/:id/redrive":                      apikey.ScopeAdmin,
	"POST /console/outbox/redrive":                          apikey.ScopeAdmin,
	"POST /console/outbox/:id/skip":                         apikey.ScopeAdmin,
	"POST /console/tasks/:task_id/versions/:version/cancel": apikey.ScopeAdmin,
	"POST /console/tasks/bulk/cancel":                       apikey.ScopeAdmin,
	"POST /console/tasks/bulk/retry":                        apikey.ScopeAdmin,
	"POST /console/timers/:biz_type/:biz_id/cancel":         apikey.ScopeAdmin,
	"POST /console/timers/:biz_type/:biz_id/redeliver":      apikey.ScopeAdmin,
	"POST /console/timers/redeliver":                        apikey.ScopeAdmin,
	"POST /console/pause":                                   apikey.ScopeAdmin,
	"POST /console/resume":                                  apikey.ScopeAdmin,
	"POST /console/schedules/:id/pause":                     apikey.ScopeAdmin,
	"POST /console/schedules/:id/unpause":                   apikey.ScopeAdmin,
}

// consoleForms are well-formed forms of the console's POST routes (the CSRF field is added
// when sent); the hostile test mutates them one field at a time.
var consoleForms = map[string]url.Values{
	"POST /console/outbox/redrive":   {"topic": {"orders.>"}, "max": {"10"}, "confirm": {"yes"}},
	"POST /console/outbox/:id/skip":  {"confirm": {"yes"}},
	"POST /console/timers/redeliver": {"biz_type": {"orders"}, "confirm": {"yes"}},
	"POST /console/pause":            {"kind": {"topic"}, "name": {"orders.>"}, "reason": {"maintenance"}},
	"POST /console/resume":           {"kind": {"topic"}, "name": {"orders.>"}},
	"POST /console/login":            {"key": {"the admin key"}}, // replaced by the real one when sent
	// As the API's bulk bodies: they match nothing (no queue hq-bulk, nothing created before 2000).
	"POST /console/tasks/bulk/cancel": {"queue": {"hq-bulk"}, "status": {"pending"}, "priority": {"3"},
		"created_after": {"1999-01-01T00:00:00Z"}, "created_before": {"2000-01-01T00:00:00Z"}, "max": {"10"}, "confirm": {"yes"}},
	"POST /console/tasks/bulk/retry": {"queue": {"hq-bulk"}, "status": {"failed"}, "priority": {"3"},
		"created_after": {"1999-01-01T00:00:00Z"}, "created_before": {"2000-01-01T00:00:00Z"}, "max": {"10"}, "confirm": {"yes"}},
}

// consoleForm is a route's well-formed form as sent: a copy, with the real admin key for the
// sign-in.
func (a *hostileAPI) consoleForm(key string) url.Values {
	v := url.Values{}
	for k, vs := range consoleForms[key] {
		v[k] = vs
	}
	if key == "POST /console/login" {
		v.Set("key", a.keys[apikey.ScopeAdmin])
	}
	return v
}

// hostileForms are sent whole (with the session's CSRF token in front) to every console POST.
var hostileForms = []string{
	"%", "a=%ZZ", "=", "&&&", "topic", "topic=%00", "max=-1&confirm=yes", "max=99999999999999999999&confirm=yes",
	"confirm=yes&topic=%24JS.API.%3E", "confirm=yes&source=..%2F..", "confirm=yes&source=%3Cscript%3E", "kind=queue&name=%3Cscript%3E", "confirm=yes&biz_type=%3Cscript%3E", "confirm=yes&biz_type=..%2F..",
	"topic=" + strings.Repeat("a.", 3000) + "&confirm=yes", strings.Repeat("x=1&", 5000),
}

var (
	noRedirects   = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	csrfInput     = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	errorPageCode = regexp.MustCompile(`data-code="([a-z_]+)"`)
)

func isConsoleRoute(path string) bool {
	return path == "/console" || strings.HasPrefix(path, "/console/")
}

// consoleSession is a signed-in browser: its session cookie and CSRF token.
type consoleSession struct{ cookie, csrf string }

func cookieOf(h http.Header, name string) string {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == name && c.Value != "" {
			return c.Name + "=" + c.Value
		}
	}
	return ""
}

// loginForm fetches the sign-in form: its nonce cookie and CSRF token.
func (a *hostileAPI) loginForm(t *testing.T) consoleSession {
	t.Helper()
	status, hdr, raw := a.send(t, "GET", "/console/login", "", "", "", nil)
	require.Equal(t, http.StatusOK, status)
	m := csrfInput.FindSubmatch(raw)
	require.NotNil(t, m)
	return consoleSession{cookie: cookieOf(hdr, "courier_console_login"), csrf: string(m[1])}
}

// signInConsole signs in with token and keeps the session under it.
func (a *hostileAPI) signInConsole(t *testing.T, token string) consoleSession {
	t.Helper()
	form := a.loginForm(t)
	status, hdr, raw := a.send(t, "POST", "/console/login", "", "", "application/x-www-form-urlencoded",
		[]byte(url.Values{"csrf": {form.csrf}, "key": {token}}.Encode()), "Cookie", form.cookie)
	require.Equal(t, http.StatusSeeOther, status, "%s", raw)
	s := consoleSession{cookie: cookieOf(hdr, "courier_console")}
	require.NotEmpty(t, s.cookie)
	status, _, raw = a.send(t, "GET", "/console", "", "", "", nil, "Cookie", s.cookie)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	m := csrfInput.FindSubmatch(raw)
	require.NotNil(t, m)
	s.csrf = string(m[1])
	a.sessions[token] = s
	return s
}

// checkConsoleAnswer holds every console answer to the rules: no 5xx, an error is a page with
// a stable code, and nothing sent comes back as markup.
func checkConsoleAnswer(t *testing.T, where string, status int, hdr http.Header, raw []byte, known map[courier.Code]bool) {
	t.Helper()
	require.Less(t, status, 500, where)
	require.NotContains(t, string(raw), "<script", where)
	if status < 400 || hdr.Get("Content-Type") == "" {
		return
	}
	require.Contains(t, hdr.Get("Content-Type"), "text/html", where)
	m := errorPageCode.FindSubmatch(raw)
	require.NotNil(t, m, "an error page names its code: %s", where)
	require.True(t, known[courier.Code(m[1])], "a stable client-error code (%s): %s", m[1], where)
}

// hostileConsole sends one console route its hostile cases as a signed-in admin; before is
// the database digest, kept current across accepted requests. It returns the cases sent.
func (a *hostileAPI) hostileConsole(t *testing.T, r *echo.Route, before *string) int {
	key := r.Method + " " + r.Path
	known := map[courier.Code]bool{}
	for _, c := range []courier.Code{courier.CodeInvalid, courier.CodeValidation, courier.CodeNotFound, courier.CodeConflict,
		courier.CodeTooLarge, courier.CodeUnsupportedMedia, courier.CodeMethodNotAllowed, courier.CodePermissionDenied} {
		known[c] = true
	}
	admin := a.sessions[a.keys[apikey.ScopeAdmin]]
	cookie, csrf := admin.cookie, admin.csrf
	if key == "POST /console/login" {
		form := a.loginForm(t)
		cookie, csrf = form.cookie, form.csrf
		known[courier.CodeUnauthenticated] = true // the form again, for a key that is not one
	}
	valid := a.path(t, r.Path, "", "")
	type hcase struct {
		what, path, query, ctype string
		body                     []byte
		outright                 bool
	}
	var cases []hcase
	formOf := func(v url.Values) []byte {
		if v == nil {
			v = url.Values{}
		}
		return []byte("csrf=" + url.QueryEscape(csrf) + "&" + v.Encode())
	}
	base := formOf(a.consoleForm(key))
	for _, p := range params(r.Path) {
		for _, v := range hostilePathValues {
			cases = append(cases, hcase{what: "path " + p + "=" + v, path: a.path(t, r.Path, p, v), body: base})
		}
		cases = append(cases, hcase{what: "path " + p + " bad escape", path: a.path(t, r.Path, p, "%ZZ"), body: base, outright: true})
	}
	if r.Method == http.MethodGet {
		for _, q := range hostileQueries {
			cases = append(cases, hcase{what: "query " + q, path: valid, query: q})
		}
	} else {
		for _, b := range hostileForms {
			cases = append(cases, hcase{what: "form " + abbreviate(b), path: valid, body: []byte("csrf=" + url.QueryEscape(csrf) + "&" + b)})
		}
		for _, b := range hostileBodies {
			cases = append(cases, hcase{what: "body " + abbreviate(b), path: valid, body: []byte(b)})
		}
		cases = append(cases,
			hcase{what: "form over the limit", path: valid, body: append(formOf(nil), []byte("&pad="+strings.Repeat("x", 70<<10))...)},
			hcase{what: "JSON instead of a form", path: valid, body: []byte(`{"csrf":"` + csrf + `"}`), ctype: "application/json"},
			hcase{what: "no CSRF token", path: valid, body: []byte(a.consoleForm(key).Encode())},
			hcase{what: "another session's token", path: valid, body: []byte("csrf=" + url.QueryEscape(a.sessions[a.keys[apikey.ScopeProducer]].csrf))},
		)
		fields := make([]string, 0, len(consoleForms[key]))
		for f := range consoleForms[key] {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		for _, f := range fields {
			for _, hv := range hostileValues {
				v := a.consoleForm(key)
				v.Set(f, strings.Trim(hv, `"`))
				cases = append(cases, hcase{what: "field " + f + "=" + abbreviate(hv), path: valid, body: formOf(v)})
			}
		}
	}
	for _, c := range cases {
		ctype := c.ctype
		if ctype == "" && len(c.body) > 0 {
			ctype = "application/x-www-form-urlencoded"
		}
		body := c.body
		if r.Method == http.MethodGet {
			body, ctype = nil, ""
		}
		status, hdr, raw := a.send(t, r.Method, c.path, c.query, "", ctype, body, "Cookie", cookie)
		where := fmt.Sprintf("%s %s?%s (%s): %d %s", r.Method, abbreviate(c.path), abbreviate(c.query), c.what, status, abbreviate(string(raw)))
		if c.outright {
			require.Equal(t, http.StatusBadRequest, status, where)
			continue
		}
		checkConsoleAnswer(t, where, status, hdr, raw, known)
		if status >= 400 {
			require.Equal(t, *before, a.snapshot(t), "a refused request writes nothing: %s", where)
			continue
		}
		*before = a.snapshot(t)
	}
	return len(cases)
}

// consoleAuth checks one console route against every session situation: none, a forged
// cookie, a revoked key's session, each scope's session, and an admin session without its CSRF
// token.
func (a *hostileAPI) consoleAuth(t *testing.T, r *echo.Route) {
	key := r.Method + " " + r.Path
	who := consoleRoutes[key]
	path := a.path(t, r.Path, "", "")
	post := r.Method == http.MethodPost
	send := func(s consoleSession, withCSRF bool) (int, http.Header, []byte) {
		var body []byte
		ctype := ""
		if post {
			v := a.consoleForm(key)
			if withCSRF {
				v.Set("csrf", s.csrf)
			}
			body, ctype = []byte(v.Encode()), "application/x-www-form-urlencoded"
		}
		return a.send(t, r.Method, path, "", "", ctype, body, "Cookie", s.cookie)
	}
	known := map[courier.Code]bool{courier.CodeUnauthenticated: true, courier.CodePermissionDenied: true, courier.CodeNotFound: true,
		courier.CodeInvalid: true, courier.CodeValidation: true, courier.CodeConflict: true}
	if who == "" {
		status, hdr, raw := send(consoleSession{}, false)
		checkConsoleAnswer(t, key+" without a session", status, hdr, raw, known)
		if !post {
			require.Equal(t, http.StatusOK, status, "a public page answers without a session")
		}
		return
	}
	refused := func(what string, s consoleSession) {
		t.Helper()
		status, hdr, raw := send(s, true)
		checkConsoleAnswer(t, what, status, hdr, raw, known)
		if post {
			require.Equal(t, http.StatusUnauthorized, status, "%s: %s", what, raw)
			require.Contains(t, string(raw), `data-code="unauthenticated"`, what)
			return
		}
		require.Equal(t, http.StatusSeeOther, status, "%s: a page sends to the sign-in", what)
		require.Equal(t, "/console/login", hdr.Get("Location"), what)
	}
	refused("no session", consoleSession{})
	refused("a forged cookie", consoleSession{cookie: "courier_console=" + strings.Repeat("A", 120)})
	refused("a revoked key's session", a.sessions[a.revoked])
	refused("a worker key, which has no session", a.sessions[a.keys[apikey.ScopeWorker]])
	for _, sc := range []apikey.Scope{apikey.ScopeAdmin, apikey.ScopeProducer} {
		s := a.sessions[a.keys[sc]]
		status, hdr, raw := send(s, true)
		where := fmt.Sprintf("%s with a %s session", key, sc)
		checkConsoleAnswer(t, where, status, hdr, raw, known)
		if who == apikey.ScopeAdmin && sc != apikey.ScopeAdmin {
			require.Equal(t, http.StatusForbidden, status, "%s: %s", where, raw)
			require.Contains(t, string(raw), "admin scope", where)
			continue
		}
		require.NotContains(t, []int{401, 403}, status, "%s: %s", where, raw)
		if key != "POST /console/logout" { // which does send to the sign-in
			require.NotEqual(t, "/console/login", hdr.Get("Location"), where)
		}
	}
	if post {
		status, hdr, raw := send(a.sessions[a.keys[apikey.ScopeAdmin]], false)
		checkConsoleAnswer(t, key+" without its CSRF token", status, hdr, raw, known)
		require.Equal(t, http.StatusForbidden, status, "an action without its CSRF token: %s", raw)
	}
}
