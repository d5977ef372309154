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
	"syscall"
	"time"

	"code.dny.dev/ssrf"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/webhook"
)

// ErrBlocked is wrapped by every refusal to reach a target.
var ErrBlocked = errors.New("callback: target not allowed")

// Options decide which targets a Client may reach.
type Options struct {
	AllowPrivate  bool          // RFC 1918, CGNAT and IPv6 ULA ranges, except the metadata addresses in them; default false
	AllowLoopback bool          // 127.0.0.0/8 and ::1 (courier dev allows it); default false
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

// neverAllowed is refused whatever Options say. The ssrf guard checks its allowed prefixes
// before its deny list, so allowing private ranges would re-open the metadata services that live
// inside them; and 168.63.129.16 is a public address no range rule refuses.
var neverAllowed = []netip.Prefix{
	// Link-local, where most metadata services answer and nothing a callback should reach
	// lives: 169.254.169.254 (EC2, GCE, Azure IMDS, OCI, OpenStack, DigitalOcean, Akamai),
	// 169.254.170.2 (ECS task credentials), 169.254.170.23 (EKS Pod Identity Agent),
	// 169.254.42.42 (Scaleway), fe80::a9fe:a9fe (OpenStack over IPv6).
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),

	// Alibaba Cloud ECS metadata, inside CGNAT 100.64.0.0/10 (Alibaba Cloud "Overview of ECS
	// instance metadata"; cloud-init's AliYun datasource).
	netip.MustParsePrefix("100.100.100.200/32"),
	// Azure WireServer and host agent, a public address (Microsoft Learn "What is IP address
	// 168.63.129.16?").
	netip.MustParsePrefix("168.63.129.16/32"),
	// Oracle Cloud Infrastructure Classic metadata, inside 192.0.0.0/24.
	netip.MustParsePrefix("192.0.0.192/32"),
	// EC2 IMDS over IPv6, inside ULA fc00::/7 (EC2 user guide "Retrieve instance metadata";
	// the AWS SDK for Go v2 feature/ec2/imds).
	netip.MustParsePrefix("fd00:ec2::254/128"),
	// EKS Pod Identity Agent over IPv6 (EKS user guide "Set up the Amazon EKS Pod Identity
	// Agent"; the AWS SDK for Go v2 container credentials provider).
	netip.MustParsePrefix("fd00:ec2::23/128"),
	// OCI IMDS over IPv6 (the endpoint Oracle's OCI SDKs and OKE node scripts fall back to).
	netip.MustParsePrefix("fd00:c1::a9fe:a9fe/128"),
	// Scaleway metadata over IPv6 (Scaleway Instance API "User data"; cloud-init's Scaleway
	// datasource).
	netip.MustParsePrefix("fd00:42::42/128"),
	// Akamai/Linode metadata over IPv6 (Akamai TechDocs "Use the Metadata service API").
	netip.MustParsePrefix("fd00:a9fe:a9fe::1/128"),
	// GCE metadata on IPv6-only instances, as several public SSRF deny lists have it; not
	// found in Google's own documentation, but refusing one ULA address costs nothing.
	netip.MustParsePrefix("fd20:ce::254/128"),
}

// refuseNeverAllowed is the first check on every dial, on the resolved address.
// IPv4-mapped IPv6 and zones are stripped first: Prefix.Contains matches neither.
func refuseNeverAllowed(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil // the ssrf guard refuses what it cannot parse
	}
	ip := ap.Addr().Unmap().WithZone("")
	for _, p := range neverAllowed {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is link-local or a cloud metadata address (denied by %s whatever the options allow)",
				ssrf.ErrProhibitedIP, ap.Addr(), p)
		}
	}
	return nil
}

// NewClient builds a Client that reaches only what opts allow, and never a link-local or cloud
// metadata address.
func NewClient(opts Options) *Client { return newClient(opts, nil) }

// newClient builds a Client. afterCheck, if set, runs on every dial the address policy let
// through, just before the connection is attempted: tests use it to see what would be dialled
// without sending packets to addresses that are not theirs.
func newClient(opts Options, afterCheck func(network, address string) error) *Client {
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
	control := func(network, address string, c syscall.RawConn) error {
		if err := refuseNeverAllowed(address); err != nil {
			return err
		}
		if err := guard.Safe(network, address, c); err != nil {
			return err
		}
		if afterCheck != nil {
			return afterCheck(network, address)
		}
		return nil
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: control}
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
		MaxIdleConnsPerHost:   IdleConnsPerHost,
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

// IdleConnsPerHost is how many kept-alive connections a client keeps to one host. Callbacks
// of a business type go to one host, many at once (a bucket sends up to 64 together), and
// net/http's default of 2 closed all but two of them after each call, so nearly every callback
// dialled a new connection.
const IdleConnsPerHost = 64

// CheckURL validates a callback URL before it is used, by courier's URL rule
// (courier.CheckCallbackURL: http or https, a host, no user info, no odd numeric spellings of
// an address). Which addresses may be reached is checked again when dialling.
func CheckURL(raw string) (*url.URL, error) {
	if err := courier.CheckCallbackURL("url", raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBlocked, err)
	}
	return url.Parse(raw)
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
// makes sense. The request is a client span under ctx's span and carries its W3C traceparent
// header (headers are outside the webhook signature, which covers id, timestamp and body).
func (c *Client) Send(ctx context.Context, r Request) error {
	_, err := c.send(ctx, r, false)
	return err
}

// MaxAnswerBytes bounds the answer SendRead reads.
const MaxAnswerBytes = 1 << 20

// SendRead is Send that also returns the body of a 2xx answer, up to MaxAnswerBytes (a longer
// one is an error: the answer would be cut).
func (c *Client) SendRead(ctx context.Context, r Request) ([]byte, error) {
	return c.send(ctx, r, true)
}

func (c *Client) send(ctx context.Context, r Request, read bool) (answer []byte, err error) {
	u, err := CheckURL(r.URL)
	if err != nil {
		return nil, &Error{Err: err}
	}
	ctx, span := tracing.Start(ctx, "callback POST", trace.SpanKindClient,
		attribute.String("http.request.method", http.MethodPost),
		attribute.String("server.address", u.Hostname()),
		attribute.String("courier.delivery_id", r.DeliveryID))
	defer func() { tracing.End(span, err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(r.Body))
	if err != nil {
		return nil, &Error{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "courier-callback/1")
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	tracing.InjectHTTP(ctx, req.Header)
	at := r.At
	if at.IsZero() {
		at = time.Now()
	}
	if r.Signer != nil {
		if err := r.Signer.Sign(req.Header, r.DeliveryID, at, r.Body); err != nil {
			return nil, &Error{Err: err}
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedNetwork) || errors.Is(err, ssrf.ErrProhibitedPort) {
			return nil, &Error{Err: fmt.Errorf("%w: %v", ErrBlocked, err)}
		}
		return nil, &Error{Outcome: Outcome{Retryable: true}, Err: fmt.Errorf("callback: %w", err)}
	}
	defer resp.Body.Close()
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if read && ok {
		answer, err = io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
		if err == nil && len(answer) > MaxAnswerBytes {
			err = fmt.Errorf("the answer is over %d bytes", MaxAnswerBytes)
		}
		if err != nil {
			return nil, &Error{Outcome: Outcome{Status: resp.StatusCode, Retryable: true}, Err: fmt.Errorf("callback: read the answer of %s: %w", u.Host, err)}
		}
	} else {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	switch {
	case ok:
		return answer, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, &Error{
			Outcome: Outcome{Status: resp.StatusCode, Retryable: true, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())},
			Err:     fmt.Errorf("callback: %s answered %d", u.Host, resp.StatusCode),
		}
	default:
		return nil, &Error{Outcome: Outcome{Status: resp.StatusCode},
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
