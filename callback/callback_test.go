package callback

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"code.dny.dev/ssrf"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/webhook"
)

// canary is a live server on loopback that counts every request that reaches it.
func canary(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// At least 30 hostile targets reach nothing, and each is refused by the address policy itself
// (not by a refused connection or a failed DNS lookup).
func TestHostileTargetsReachNothing(t *testing.T) {
	srv, hits := canary(t)
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	names := map[string][]string{
		"internal.example": {"127.0.0.1"},
		"metadata.example": {"169.254.169.254"},
		"rebind.example":   {"10.0.0.5", "127.0.0.1"},
		"mapped.example":   {"::ffff:127.0.0.1"},
		"ula.example":      {"fd12:3456::1"},
	}
	c := NewClient(Options{Timeout: 2 * time.Second, LookupHost: func(_ context.Context, host string) ([]string, error) {
		if ips, ok := names[host]; ok {
			return ips, nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}})
	targets := []string{
		"http://127.0.0.1:" + port + "/",
		"http://127.0.0.2:" + port + "/",
		"http://[::1]:" + port + "/",
		"http://0.0.0.0:" + port + "/",
		"http://[::]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://[::ffff:7f00:1]:" + port + "/",
		"http://10.0.0.1/",
		"http://10.255.255.254:8080/",
		"http://172.16.0.1/",
		"http://172.31.255.1/",
		"http://192.168.0.1/",
		"http://192.168.1.254:8443/",
		"http://169.254.169.254/latest/meta-data/",
		"http://169.254.170.2/v2/credentials",
		"http://100.64.0.1/",
		"http://[fe80::1]/",
		"http://[fc00::1]/",
		"http://[fd00:ec2::254]/",
		"http://[::ffff:10.0.0.1]/",
		"http://[::ffff:169.254.169.254]/",
		"http://224.0.0.1/",
		"http://255.255.255.255/",
		"http://198.18.0.1/",
		"http://2130706433:" + port + "/",
		"http://0177.0.0.1:" + port + "/",
		"http://0x7f.0.0.1:" + port + "/",
		"http://017700000001:" + port + "/",
		"http://0x7f000001:" + port + "/",
		"http://127.1:" + port + "/",
		"http://internal.example:" + port + "/",
		"http://metadata.example/",
		"http://rebind.example:" + port + "/",
		"http://mapped.example:" + port + "/",
		"http://ula.example/",
		"file:///etc/passwd",
		"gopher://127.0.0.1:" + port + "/",
		"http://user:pass@127.0.0.1:" + port + "/",
	}
	require.GreaterOrEqual(t, len(targets), 30)
	for _, target := range targets {
		err := c.Send(context.Background(), Request{URL: target, DeliveryID: "d1", Body: []byte(`{}`)})
		require.Error(t, err, target)
		require.ErrorIs(t, err, ErrBlocked, "%s must be refused by policy, got: %v", target, err)
		var ce *Error
		require.True(t, errors.As(err, &ce))
		require.False(t, ce.Retryable, "%s: a blocked target is not retried", target)
	}
	require.Zero(t, hits.Load(), "nothing reached the canary")

	// The canary is reachable when loopback is allowed: the refusals above are the policy's.
	dev := NewClient(Options{AllowLoopback: true})
	require.NoError(t, dev.Send(context.Background(), Request{URL: srv.URL, DeliveryID: "d2", Body: []byte(`{}`)}))
	require.Equal(t, int64(1), hits.Load())
}

// Redirects are never followed, even where the origin itself is allowed.
func TestRedirectsAreNotFollowed(t *testing.T) {
	target, hits := canary(t)
	for _, to := range []string{target.URL, "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/"} {
		origin := httptest.NewServer(http.RedirectHandler(to, http.StatusFound))
		c := NewClient(Options{AllowLoopback: true})
		err := c.Send(context.Background(), Request{URL: origin.URL, DeliveryID: "d", Body: []byte(`{}`)})
		origin.Close()
		var ce *Error
		require.True(t, errors.As(err, &ce), "a redirect is a failed delivery")
		require.Equal(t, http.StatusFound, ce.Status)
		require.False(t, ce.Retryable)
	}
	require.Zero(t, hits.Load())
}

// errWouldDial stands in for a connection the address policy let through, so tests learn what
// would be dialled without sending a packet to an address that is not theirs.
var errWouldDial = errors.New("test: the address policy let this dial through")

// dryClient is a client whose dials stop right after the address policy, recording each
// address it let through.
func dryClient(opts Options) (*Client, func() []string) {
	var mu sync.Mutex
	var passed []string
	c := newClient(opts, func(_, address string) error {
		mu.Lock()
		defer mu.Unlock()
		passed = append(passed, address)
		return errWouldDial
	})
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(passed)
	}
}

func TestPrivateTargetsNeedOptIn(t *testing.T) {
	send := func(c *Client, target string) error {
		return c.Send(context.Background(), Request{URL: target, DeliveryID: "d", Body: []byte(`{}`)})
	}
	closed, _ := dryClient(Options{})
	require.ErrorIs(t, send(closed, "http://10.255.255.1:9/"), ErrBlocked)

	c, passed := dryClient(Options{AllowPrivate: true})
	err := send(c, "http://10.255.255.1:9/")
	require.ErrorIs(t, err, errWouldDial, "allowed now: the policy lets the dial through")
	require.NotErrorIs(t, err, ErrBlocked)
	require.Equal(t, []string{"10.255.255.1:9"}, passed())
	// Metadata and loopback stay refused.
	for _, target := range []string{"http://169.254.169.254/", "http://127.0.0.1:9/"} {
		require.ErrorIs(t, send(c, target), ErrBlocked, target)
	}
	require.Len(t, passed(), 1)
}

// Link-local and cloud metadata addresses are refused whatever the options allow: as literals,
// in their IPv4-mapped IPv6 form, and behind names that resolve to them (the check runs on the
// resolved address at dial time). They are never reached: the dial stops at the policy. An
// ordinary private address is let through when private targets are allowed.
func TestMetadataAndLinkLocalAreNeverAllowed(t *testing.T) {
	never := []string{
		"169.254.169.254",        // EC2, GCE, Azure, OCI, OpenStack, DigitalOcean, Akamai
		"169.254.170.2",          // ECS task credentials
		"169.254.170.23",         // EKS Pod Identity Agent
		"169.254.42.42",          // Scaleway
		"169.254.0.1",            // the rest of link-local
		"169.254.255.254",        //
		"100.100.100.200",        // Alibaba Cloud, inside CGNAT
		"168.63.129.16",          // Azure WireServer, a public address
		"192.0.0.192",            // Oracle Cloud Classic
		"fd00:ec2::254",          // EC2 IMDS over IPv6, inside ULA
		"fd00:ec2::23",           // EKS Pod Identity Agent over IPv6
		"fd00:c1::a9fe:a9fe",     // OCI over IPv6
		"fd00:42::42",            // Scaleway over IPv6
		"fd00:a9fe:a9fe::1",      // Akamai/Linode over IPv6
		"fd20:ce::254",           // GCE over IPv6
		"fe80::1",                // IPv6 link-local
		"fe80::a9fe:a9fe",        // OpenStack over IPv6
		"febf:ffff::1",           // the end of fe80::/10
		"::ffff:169.254.169.254", // IPv4-mapped forms
		"::ffff:169.254.170.2",
		"::ffff:100.100.100.200",
		"::ffff:168.63.129.16",
		"::ffff:192.0.0.192",
		"64:ff9b::a9fe:a9fe", // NAT64 of 169.254.169.254
		"2002:a9fe:a9fe::1",  // 6to4 of 169.254.169.254
	}
	names := map[string][]string{}
	var targets []string
	for i, ip := range never {
		host := ip
		if strings.Contains(ip, ":") {
			host = "[" + ip + "]"
		}
		name := fmt.Sprintf("meta%d.example", i)
		names[name] = []string{ip}
		targets = append(targets, "http://"+host+"/", "http://"+host+":8080/", "http://"+name+"/")
	}
	names["private.example"] = []string{"10.20.30.40"}
	lookup := func(_ context.Context, host string) ([]string, error) {
		if ips, ok := names[host]; ok {
			return ips, nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}

	for _, opts := range []Options{
		{AllowPrivate: true, AllowLoopback: true},
		{AllowPrivate: true},
		{AllowLoopback: true},
		{},
	} {
		opts.LookupHost = lookup
		c, passed := dryClient(opts)
		for _, target := range targets {
			err := c.Send(context.Background(), Request{URL: target, DeliveryID: "d", Body: []byte(`{}`)})
			require.ErrorIs(t, err, ErrBlocked, "%+v: %s must be refused by policy, got: %v", opts, target, err)
			var ce *Error
			require.True(t, errors.As(err, &ce))
			require.False(t, ce.Retryable, "%s: a blocked target is not retried", target)
		}
		require.Empty(t, passed(), "%+v: no metadata or link-local address got past the policy", opts)

		if !opts.AllowPrivate {
			continue
		}
		// The same client lets an ordinary private address through, by literal and by name.
		for _, target := range []string{"http://10.1.2.3/", "http://172.16.5.4:8443/", "http://192.168.1.1/",
			"http://100.64.0.1/", "http://[fd12:3456::1]/", "http://private.example/"} {
			err := c.Send(context.Background(), Request{URL: target, DeliveryID: "d", Body: []byte(`{}`)})
			require.ErrorIs(t, err, errWouldDial, "%+v: %s is allowed", opts, target)
			require.NotErrorIs(t, err, ErrBlocked, target)
		}
		require.Equal(t, []string{"10.1.2.3:80", "172.16.5.4:8443", "192.168.1.1:80", "100.64.0.1:80",
			"[fd12:3456::1]:80", "10.20.30.40:80"}, passed())
	}
}

// The never-allowed check sees through IPv6 zones, which netip.Prefix.Contains does not match.
func TestRefuseNeverAllowedIgnoresZones(t *testing.T) {
	require.ErrorIs(t, refuseNeverAllowed("[fe80::1%eth0]:80"), ssrf.ErrProhibitedIP)
	require.ErrorIs(t, refuseNeverAllowed("[fd00:ec2::254%eth0]:80"), ssrf.ErrProhibitedIP)
	require.NoError(t, refuseNeverAllowed("10.0.0.1:80"))
	require.NoError(t, refuseNeverAllowed("not an address"), "left to the ssrf guard")
}

func TestClassificationAndSigning(t *testing.T) {
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	signer, _ := webhook.NewSigner(secret)
	verifier, _ := webhook.NewVerifier(secret)
	var status atomic.Int64
	status.Store(200)
	srv := httptest.NewServer(verifier.Middleware(0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := status.Load(); s == 429 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
			return
		}
		w.WriteHeader(int(status.Load()))
	})))
	defer srv.Close()
	c := NewClient(Options{AllowLoopback: true})
	send := func(id string) error {
		return c.Send(context.Background(), Request{URL: srv.URL, DeliveryID: id, Body: []byte(`{"timer":"order/1"}`), Signer: signer})
	}
	require.NoError(t, send("a"), "2xx with a valid signature")

	cases := []struct {
		status    int
		retryable bool
		after     time.Duration
	}{{500, true, 0}, {503, true, 0}, {429, true, 7 * time.Second}, {400, false, 0}, {404, false, 0}, {410, false, 0}}
	for i, tc := range cases {
		status.Store(int64(tc.status))
		err := send(fmt.Sprint("c", i))
		var ce *Error
		require.True(t, errors.As(err, &ce), "status %d", tc.status)
		require.Equal(t, tc.status, ce.Status)
		require.Equal(t, tc.retryable, ce.Retryable, "status %d", tc.status)
		require.Equal(t, tc.after, ce.RetryAfter, "status %d", tc.status)
	}

	// A timeout is retryable.
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release) // runs first: lets the handler return so Close does not wait
	fast := NewClient(Options{AllowLoopback: true, Timeout: 100 * time.Millisecond})
	err = fast.Send(context.Background(), Request{URL: slow.URL, DeliveryID: "t", Body: []byte(`{}`)})
	var ce *Error
	require.True(t, errors.As(err, &ce))
	require.True(t, ce.Retryable)
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, 30*time.Second, retryAfter("30", now))
	require.Equal(t, 2*time.Minute, retryAfter(now.Add(2*time.Minute).Format(http.TimeFormat), now))
	require.Equal(t, time.Hour, retryAfter("999999", now), "capped")
	require.Zero(t, retryAfter("soon", now))
	require.Zero(t, retryAfter("-5", now))
}

// A pool hands out one client per policy, so sends to one target reuse connections.
func TestPoolReusesClients(t *testing.T) {
	var p Pool
	a := p.Client(Options{AllowLoopback: true, Timeout: time.Second})
	require.Same(t, a, p.Client(Options{AllowLoopback: true, Timeout: time.Second}))
	require.NotSame(t, a, p.Client(Options{AllowLoopback: true, Timeout: 2 * time.Second}))
	require.NotSame(t, a, p.Client(Options{Timeout: time.Second}), "another policy, another client")
}
