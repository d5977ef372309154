package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/internal/defaults"
)

// Client calls courier's gateway. It is safe for concurrent use; build one per gateway and
// API key and share it.
type Client struct {
	base      string // scheme://host[/prefix], no trailing slash
	key       string
	hc        *http.Client
	retry     RetryPolicy
	userAgent string
}

// Option configures a Client built by New.
type Option func(*Client)

// WithAPIKey sends key as "Authorization: Bearer <key>" on every call. Producers need the
// producer scope, task workers the worker scope, the queue and business-type calls admin.
func WithAPIKey(key string) Option { return func(c *Client) { c.key = key } }

// WithHTTPClient sets the HTTP client (transport, proxies, TLS, timeouts). Default: a client
// with a 60 s timeout per request and http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetry sets the retry policy (default DefaultRetryPolicy; MaxAttempts 1 turns retries
// off). Zero fields take their defaults.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// WithUserAgent sets the User-Agent header (default "courier-go-client").
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// RetryPolicy bounds the retries of one call. Which calls are retried, and on what:
//
//   - idempotent calls — every GET, PUT and DELETE, PATCH of a timer or schedule, pause and
//     unpause of a schedule, timer create (the same body again returns the same timer) and task
//     insert (the same version again returns the same task) — on 502, 503, 504, 429 and
//     connection errors;
//   - the other calls (publish, redrive, trigger, result) only when the gateway certainly did
//     nothing: a 429 (admission control refuses before writing anything) or a connection that
//     could not be opened.
//
// The wait before a retry is the answer's Retry-After when it has one, otherwise an
// exponential backoff with jitter. A retry that could not start within MaxElapsed of the
// call's start, or before the context's deadline, is not made: the last error is returned.
type RetryPolicy struct {
	MaxAttempts    int           // tries in all, counting the first; default 4; 1: no retries
	InitialBackoff time.Duration // first backoff; default 200 ms, doubling
	MaxBackoff     time.Duration // cap of one backoff; default 5 s
	MaxElapsed     time.Duration // no retry starts later than this after the call began; default 30 s
}

// DefaultRetryPolicy is the policy of a Client built without WithRetry.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, InitialBackoff: 200 * time.Millisecond,
	MaxBackoff: 5 * time.Second, MaxElapsed: 30 * time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	defaults.UnlessPositive(&p.MaxAttempts, d.MaxAttempts)
	defaults.UnlessPositive(&p.InitialBackoff, d.InitialBackoff)
	defaults.UnlessPositive(&p.MaxBackoff, d.MaxBackoff)
	defaults.UnlessPositive(&p.MaxElapsed, d.MaxElapsed)
	return p
}

// backoff is the wait before retry n (from 1): InitialBackoff·2^(n-1), capped, with the upper
// half jittered so that many clients refused at once do not come back at once.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.InitialBackoff
	for i := 1; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

var defaultHTTPClient = &http.Client{Timeout: 60 * time.Second}

// New builds a client of the gateway at baseURL ("http://127.0.0.1:8080"; a path prefix is
// kept, for a gateway behind a proxy under /courier, say).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("courier client: base URL %q must be an absolute http or https URL without query", baseURL)
	}
	c := &Client{base: strings.TrimRight(u.String(), "/"), hc: defaultHTTPClient, userAgent: "courier-go-client"}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = defaultHTTPClient
	}
	c.retry = c.retry.withDefaults()
	return c, nil
}

// BaseURL is the gateway's URL as given to New, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// call is one API request.
type call struct {
	method     string
	path       string // escaped, from /v1
	query      url.Values
	body       any  // JSON-encoded once; nil: no body
	idempotent bool // may be repeated whatever happened to an earlier try
	out        any  // decoded from a 2xx answer's body; nil: ignored
	header     http.Header
}

// maxAnswerBytes bounds an answer read into memory (an outbox page with payloads holds at most
// 4 MiB of them, base64-encoded).
const maxAnswerBytes = 64 << 20

// do runs c with retries per the policy and returns the status of the 2xx answer.
func (c *Client) do(ctx context.Context, cl call) (int, error) {
	var body []byte
	if cl.body != nil {
		var err error
		if body, err = json.Marshal(cl.body); err != nil {
			return 0, fmt.Errorf("courier: %s %s: encode the body: %w", cl.method, cl.path, err)
		}
	}
	start := time.Now()
	for try := 1; ; try++ {
		status, err := c.once(ctx, cl, body)
		if err == nil {
			return status, nil
		}
		wait, ok := c.retryable(ctx, cl, err, try)
		if !ok {
			return 0, err
		}
		if time.Since(start)+wait > c.retry.MaxElapsed {
			return 0, err
		}
		if dl, has := ctx.Deadline(); has && time.Now().Add(wait).After(dl) {
			return 0, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
	}
}

// fetch runs cl and returns the answer it decodes into a new T.
func fetch[T any](ctx context.Context, c *Client, cl call) (*T, error) {
	out, _, err := fetchStatus[T](ctx, c, cl)
	return out, err
}

// fetchStatus is fetch that also returns the answer's status (201: a PUT or POST created).
func fetchStatus[T any](ctx context.Context, c *Client, cl call) (*T, int, error) {
	out := new(T)
	cl.out = out
	st, err := c.do(ctx, cl)
	if err != nil {
		return nil, 0, err
	}
	return out, st, nil
}

// retryable says whether try may be followed by another, and after how long.
func (c *Client) retryable(ctx context.Context, cl call, err error, try int) (time.Duration, bool) {
	if try >= c.retry.MaxAttempts || ctx.Err() != nil {
		return 0, false
	}
	wait := c.retry.backoff(try)
	var ae *Error
	if errors.As(err, &ae) {
		switch {
		case ae.StatusCode == http.StatusTooManyRequests:
			// Admission control refuses before anything is written: safe for every call.
		case cl.idempotent && (ae.StatusCode == http.StatusServiceUnavailable ||
			ae.StatusCode == http.StatusBadGateway || ae.StatusCode == http.StatusGatewayTimeout):
		default:
			return 0, false
		}
		return max(wait, ae.RetryAfter), true
	}
	var te *transportError
	if !errors.As(err, &te) {
		return 0, false
	}
	if cl.idempotent || te.notSent {
		return wait, true
	}
	return 0, false
}

// transportError is a call that got no HTTP answer.
type transportError struct {
	method, path string
	notSent      bool // the connection could not be opened: the gateway never saw the request
	err          error
}

func (e *transportError) Error() string {
	return fmt.Sprintf("courier: %s %s: %v", e.method, e.path, e.err)
}

func (e *transportError) Unwrap() error { return e.err }

// neverSent reports a transport error that happened before a connection existed.
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// once sends one try.
func (c *Client) once(ctx context.Context, cl call, body []byte) (int, error) {
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, rd)
	if err != nil {
		return 0, fmt.Errorf("courier: %s %s: %w", cl.method, cl.path, err)
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("courier: %s %s: %w", cl.method, cl.path, context.Cause(ctx))
		}
		return 0, &transportError{method: cl.method, path: cl.path, notSent: neverSent(err), err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	switch {
	case err != nil:
		return 0, &transportError{method: cl.method, path: cl.path, err: fmt.Errorf("read the answer: %w", err)}
	case len(raw) > maxAnswerBytes:
		return 0, fmt.Errorf("courier: %s %s: the answer is over %d bytes", cl.method, cl.path, maxAnswerBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, newError(cl.method, cl.path, resp, raw)
	}
	if cl.out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, cl.out); err != nil {
			return 0, fmt.Errorf("courier: %s %s: decode the answer: %w", cl.method, cl.path, err)
		}
	}
	return resp.StatusCode, nil
}

// listQuery is the query of a list call; its setters leave a zero value out (no filter, the
// gateway's default).
type listQuery url.Values

func (q listQuery) text(k, s string) listQuery {
	if s != "" {
		url.Values(q).Set(k, s)
	}
	return q
}

func (q listQuery) number(k string, n int) listQuery {
	if n != 0 {
		url.Values(q).Set(k, strconv.Itoa(n))
	}
	return q
}

func (q listQuery) time(k string, t time.Time) listQuery {
	if !t.IsZero() {
		url.Values(q).Set(k, t.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// seg escapes one path segment (an id, a name); the gateway decodes each exactly once.
func seg(s string) string { return url.PathEscape(s) }

// pages yields the items of one list page after page, until a page has no next token: page
// reads the page of the query whose page token is *token, which pages sets (from the token it
// holds at the start). It stops at the first error, which it yields.
func pages[T any](token *string, page func() (*api.List[T], error)) iter.Seq2[T, error] {
	start := *token
	return func(yield func(T, error) bool) {
		*token = start
		for {
			p, err := page()
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range p.Items {
				if !yield(it, nil) {
					return
				}
			}
			if p.NextPageToken == "" {
				return
			}
			*token = p.NextPageToken
		}
	}
}
