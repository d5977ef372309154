package gateway

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// The console's templates and its one stylesheet, compiled into the binary. Every value a page
// shows goes through html/template's contextual escaping; nothing producer-written (topics,
// keys, ids, payloads, headers, error texts, worker messages) is ever marked safe.
//
//go:embed console
var consoleFiles embed.FS

// consolePages are the pages; each is console/layout.html plus console/<name>.html.
var consolePages = []string{"login", "overview", "tasks", "task", "outbox", "record", "timers", "timer", "error"}

// consolePage is what every page template gets.
type consolePage struct {
	Title       string
	Viewer      *consoleViewer // nil on the sign-in and some error pages
	CSRF        string
	Flash       string       // what the last action did
	Problem     string       // the sign-in form's complaint
	ProblemCode courier.Code // and its code
	Data        any          // the page's own data
	Code        courier.Code
	Message     string
}

// consoleView renders the pages, with links to the Temporal UI built from the configuration.
type consoleView struct {
	pages map[string]*template.Template
}

func newConsoleView(cfg ConsoleConfig, hasTasks, hasTimers bool) *consoleView {
	funcs := template.FuncMap{
		// The navigation leaves out the lists of services the gateway was built without.
		"hasTasks":  func() bool { return hasTasks },
		"hasTimers": func() bool { return hasTimers },
		// temporal links a workflow id to the Temporal UI (its latest run); "" without a UI or
		// a workflow (an outbox record no workflow has taken yet).
		"temporal": func(workflowID string) string {
			if cfg.TemporalUIURL == "" || workflowID == "" {
				return ""
			}
			return cfg.TemporalUIURL + "/namespaces/" + url.PathEscape(cfg.Namespace) + "/workflows/" + url.PathEscape(workflowID)
		},
		"temporalSchedule": func(id string) string {
			if cfg.TemporalUIURL == "" {
				return ""
			}
			return cfg.TemporalUIURL + "/namespaces/" + url.PathEscape(cfg.Namespace) + "/schedules/" + url.PathEscape(courier.ScheduleID(id))
		},
		"temporalHome": func() string {
			if cfg.TemporalUIURL == "" {
				return ""
			}
			return cfg.TemporalUIURL + "/namespaces/" + url.PathEscape(cfg.Namespace) + "/workflows"
		},
		"link": consoleLink,
		// nondefault is a source for a link's query: "" for courier's own.
		"nondefault": func(source string) string {
			if source == courier.DefaultSource {
				return ""
			}
			return source
		},
		"seg":      url.PathEscape,
		"when":     when,
		"ago":      ago,
		"dur":      roundDuration,
		"clip":     clip,
		"jsonText": jsonText,
		"rows":     func(n int64) string { return fmt.Sprintf("%d", n) },
		"add":      func(a, b int) int { return a + b },
		"pct": func(a, b int) int {
			if b <= 0 {
				return 0
			}
			return min(100, a*100/b)
		},
		"cancellable": func(s courier.TaskStatus) bool { return s == courier.TaskPending || s == courier.TaskProcessing },
		"payloadText": func(r api.OutboxRecord) string {
			if r.PayloadEncoding == "json" {
				return jsonText(r.Payload)
			}
			return clip(string(r.Payload), maxShownBytes)
		},
	}
	v := &consoleView{pages: map[string]*template.Template{}}
	for _, name := range consolePages {
		v.pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", "console/"+name+".html"))
	}
	return v
}

// render writes a page with the console's headers.
func (v *consoleView) render(c echo.Context, status int, name string, p consolePage) error {
	if p.Viewer == nil {
		p.Viewer = viewerOf(c)
	}
	if p.Viewer != nil && p.CSRF == "" {
		p.CSRF = p.Viewer.CSRF
	}
	var buf bytes.Buffer
	if err := v.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		return err
	}
	setConsoleHeaders(c.Response().Header())
	if c.Request().Method == http.MethodHead {
		return c.NoContent(status)
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// errorPage renders an error of a console request as a page: the same status and code the API
// would answer, the message escaped like everything else.
func (v *consoleView) errorPage(c echo.Context, status int, body api.ErrorBody) error {
	title := http.StatusText(status)
	if title == "" {
		title = "Error"
	}
	return v.render(c, status, "error", consolePage{Title: title, Code: body.Error.Code, Message: body.Error.Message})
}

// consoleLink is a console URL: a path the console builds (its segments escaped with seg) and
// query pairs, empty values left out.
func consoleLink(p string, kv ...string) (template.URL, error) {
	if p != "/console" && !strings.HasPrefix(p, "/console/") {
		return "", fmt.Errorf("console link outside the console: %q", p)
	}
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return template.URL(p), nil
	}
	return template.URL(p + "?" + q.Encode()), nil
}

// maxShownBytes bounds a payload, result or error text shown on a page.
const maxShownBytes = 64 << 10

func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil || v.IsZero() {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	}
	return "—"
}

// ago says how long ago (or how far ahead) t is, roughly.
func ago(t any) string {
	var at time.Time
	switch v := t.(type) {
	case time.Time:
		at = v
	case *time.Time:
		if v != nil {
			at = *v
		}
	}
	if at.IsZero() {
		return "—"
	}
	d := time.Since(at)
	if d < 0 {
		return "in " + roundDuration(-d)
	}
	return roundDuration(d) + " ago"
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// jsonText shows JSON indented (as text: the template escapes it), clipped.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return clip(string(raw), maxShownBytes)
	}
	return clip(buf.String(), maxShownBytes)
}

// consoleStatic returns a file of console/static.
func consoleStatic(name string) ([]byte, string, bool) {
	if name != path.Base(name) || !strings.HasSuffix(name, ".css") {
		return nil, "", false
	}
	b, err := consoleFiles.ReadFile("console/static/" + name)
	if err != nil {
		return nil, "", false
	}
	return b, "text/css; charset=utf-8", true
}
