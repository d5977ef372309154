package callback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"code.dny.dev/ssrf"

	"github.com/courier-oss/courier/webhook"
)

// ErrBlocked is wrapped by every refusal to reach a target.
var ErrBlocked = errors.New("callback: target not allowed")

// Options decide which targets a Client may reach.
type Options struct {
	AllowPrivate  bool          // RFC 1918, CGNAT and IPv6 ULA ranges (never metadata or link-local)
	AllowLoopback bool          // 127.0.0.0/8 and ::1 (courier dev allows it)
	Timeout       time.Duration // whole request; default 10 s
	// LookupHost resolves names; nil uses the system resolver. Tests use it to make a name
	// resolve to a forbidden address.
	LookupHost func(ctx context.Context, host string) ([]string, error)
}

// Client sends callbacks under Options.
type Client struct {
	hc   *http.Client
	opts Options
}

var (
	privateV4 = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"),
	}
	privateV6  = []netip.Prefix{netip.MustParsePrefix("fc00::/7")}
	loopbackV4 = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	loopbackV6 = []netip.Prefix{netip.MustParsePrefix("::1/128")}
)

// NewClient builds a Client.
func NewClient(opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	var v4, v6 []netip.Prefix
	if opts.AllowPrivate {
		v4, v6 = append(v4, privateV4...), append(v6, privateV6...)
	}
	if opts.AllowLoopback {
		v4, v6 = append(v4, loopbackV4...), append(v6, loopbackV6...)
	}
	guard := ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...))
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: guard.Safe}
	dial := dialer.DialContext
	if opts.LookupHost != nil {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			ips := []string{host}
			if _, perr := netip.ParseAddr(host); perr != nil {
				if ips, err = opts.LookupHost(ctx, host); err != nil {
					return nil, err
				}
			}
			var last error = fmt.Errorf("no addresses for %s", host)
			for _, ip := range ips {
				c, err := dialer.DialContext(ctx, network, net.JoinHostPort(ip, port))
				if err == nil {
					return c, nil
				}
				last = err
			}
			return nil, last
		}
	}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us and bypass the address check
		DialContext:           dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: opts.Timeout,
	}
	return &Client{opts: opts, hc: &http.Client{
		Transport: tr,
		Timeout:   opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // never follow: a redirect is the response
		},
	}}
}

// CheckURL validates a callback URL before it is stored: http or https, a host, no user info,
// and no numeric host that is not a canonical IP address (decimal, octal or hex spellings that
// some resolvers turn into internal addresses).
func CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBlocked, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme must be http or https", ErrBlocked)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: user info in URLs is not allowed", ErrBlocked)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("%w: URL has no host", ErrBlocked)
	}
	if _, err := netip.ParseAddr(host); err != nil && looksNumeric(host) {
		return nil, fmt.Errorf("%w: %q is not a canonical IP address", ErrBlocked, host)
	}
	return u, nil
}

// looksNumeric reports hosts made only of digits, dots and hex markers ("2130706433",
// "0177.0.0.1", "0x7f.1") — no real DNS name looks like that.
func looksNumeric(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return false
		}
		l := strings.TrimPrefix(label, "0x")
		for _, c := range l {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		if !strings.HasPrefix(label, "0x") {
			for _, c := range label {
				if c < '0' || c > '9' {
					return false
				}
			}
		}
	}
	return true
}

// Request is one callback.
type Request struct {
	URL        string
	DeliveryID string // idempotency key: the same for every retry of one delivery
	Body       []byte // JSON
	Signer     *webhook.Signer
	At         time.Time // signing time; default now
	Headers    map[string]string
}

// Outcome classifies a finished attempt.
type Outcome struct {
	Status     int           // HTTP status, 0 if no response
	Retryable  bool          // try again later
	RetryAfter time.Duration // from Retry-After, if the target sent one
}

// Error is a failed attempt with its classification.
type Error struct {
	Outcome
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Send delivers r once. It returns nil on 2xx; otherwise an *Error that says whether a retry
// makes sense.
func (c *Client) Send(ctx context.Context, r Request) error {
	u, err := CheckURL(r.URL)
	if err != nil {
		return &Error{Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(r.Body))
	if err != nil {
		return &Error{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "courier-callback/1")
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	at := r.At
	if at.IsZero() {
		at = time.Now()
	}
	if r.Signer != nil {
		if err := r.Signer.Sign(req.Header, r.DeliveryID, at, r.Body); err != nil {
			return &Error{Err: err}
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedNetwork) || errors.Is(err, ssrf.ErrProhibitedPort) {
			return &Error{Err: fmt.Errorf("%w: %v", ErrBlocked, err)}
		}
		return &Error{Outcome: Outcome{Retryable: true}, Err: fmt.Errorf("callback: %w", err)}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return &Error{
			Outcome: Outcome{Status: resp.StatusCode, Retryable: true, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())},
			Err:     fmt.Errorf("callback: %s answered %d", u.Host, resp.StatusCode),
		}
	default:
		return &Error{Outcome: Outcome{Status: resp.StatusCode},
			Err: fmt.Errorf("callback: %s answered %d (not retried)", u.Host, resp.StatusCode)}
	}
}

// retryAfter parses Retry-After (seconds or an HTTP date), capped at one hour.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	if d < 0 {
		return 0
	}
	return min(d, time.Hour)
}

// Pool hands out one Client per set of options, so callbacks to the same targets reuse their
// connections instead of opening (and leaving idle) a new one per send. Safe for concurrent use.
type Pool struct {
	mu      sync.Mutex
	clients map[poolKey]*Client
}

type poolKey struct {
	allowPrivate, allowLoopback bool
	timeout                     time.Duration
}

// Client returns the pooled client for opts. Options with a LookupHost (tests) are not pooled.
func (p *Pool) Client(opts Options) *Client {
	if opts.LookupHost != nil {
		return NewClient(opts)
	}
	k := poolKey{opts.AllowPrivate, opts.AllowLoopback, opts.Timeout}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[k]; ok {
		return c
	}
	if p.clients == nil {
		p.clients = map[poolKey]*Client{}
	}
	c := NewClient(opts)
	p.clients[k] = c
	return c
}
