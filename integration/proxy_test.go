package integration

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tcpProxy forwards TCP connections to a target (a broker): cut drops every connection and
// refuses new ones, as a network partition would, until restore.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	down  bool
}

// newProxy proxies the host:port of target (a URL such as nats://127.0.0.1:4222).
func newProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: u.Host}
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	go p.serve()
	return p
}

// url is the proxy's address as a URL of the target's scheme.
func (p *tcpProxy) url(scheme string) string { return scheme + "://" + p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(b, c); _ = b.Close() }()
		go func() { _, _ = io.Copy(c, b); _ = c.Close() }()
	}
}

// cut drops every open connection and refuses new ones.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// restore accepts connections again.
func (p *tcpProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}
