package mqtest

import (
	"net"
	"sync"
	"testing"
)

// Gate wraps a listener so a test can make the server behind it unreachable without stopping
// it: Cut closes every connection accepted so far and closes new ones as soon as they are
// accepted, Restore lets connections through again. A client sees its connection drop and every
// reconnect fail, as when a broker goes away, while the server keeps its state and its address
// (which matters for brokers that advertise their own address, as Kafka does).
type Gate struct {
	net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[*gateConn]struct{}
}

// NewGate wraps l; it starts open.
func NewGate(l net.Listener) *Gate {
	return &Gate{Listener: l, conns: make(map[*gateConn]struct{})}
}

// Accept returns the next connection that arrives while the gate is open.
func (g *Gate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		if g.cut {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		gc := &gateConn{Conn: c, g: g}
		g.conns[gc] = struct{}{}
		g.mu.Unlock()
		return gc, nil
	}
}

// Cut closes every open connection and refuses new ones until Restore.
func (g *Gate) Cut() {
	g.mu.Lock()
	g.cut = true
	conns := make([]*gateConn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Restore lets connections through again.
func (g *Gate) Restore() {
	g.mu.Lock()
	g.cut = false
	g.mu.Unlock()
}

type gateConn struct {
	net.Conn
	g    *Gate
	once sync.Once
}

func (c *gateConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
	})
	return err
}

// Proxy is a TCP proxy on 127.0.0.1 in front of a server the test cannot stop (a shared
// RabbitMQ, for instance). Clients dial Addr; Cut and Restore work as on a Gate; Stall and
// Resume make every connection go silent without closing it.
type Proxy struct {
	gate   *Gate
	valve  *valve
	target string
	closed chan struct{} // closed by Close: a held-back pipe gives up
	wg     sync.WaitGroup
	once   sync.Once
}

// NewProxy listens on a free port of 127.0.0.1 and forwards every connection to target. It is
// closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &Proxy{gate: NewGate(l), valve: newValve(), target: target, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the host:port clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.gate.Addr().String() }

// Cut closes every proxied connection and refuses new ones until Restore.
func (p *Proxy) Cut() { p.gate.Cut() }

// Restore lets connections through again.
func (p *Proxy) Restore() { p.gate.Restore() }

// Stall stops carrying bytes, both ways, on every connection, open or new, without closing
// any: the client sees a server that is there and never answers, as when the network path to
// it dies without a reset. Nothing is lost: Resume delivers what was held back.
func (p *Proxy) Stall() { p.valve.shut() }

// Resume carries bytes again after Stall.
func (p *Proxy) Resume() { p.valve.release() }

// Close stops listening, closes every connection and waits for the forwarding goroutines.
func (p *Proxy) Close() {
	p.once.Do(func() {
		_ = p.gate.Listener.Close()
		close(p.closed)
		p.gate.Cut()
		p.wg.Wait()
	})
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		down, err := p.gate.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(down)
		}()
	}
}

func (p *Proxy) forward(down net.Conn) {
	defer down.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_ = p.carry(dst, src) // a reset or a closed conn is how a cut looks from here
		// Either side ending ends both: a half-open proxied connection would hide a cut.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, down)
	go pipe(down, up)
	<-done
	<-done
}

// carry copies src to dst until either fails, holding each read back while the proxy stalls.
func (p *Proxy) carry(dst, src net.Conn) error {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.valve.flowing():
			case <-p.closed:
				return net.ErrClosed
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}
