package embeddednats

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

const (
	// DefaultHost is the interface the server binds to when Config.Host is empty.
	DefaultHost = "127.0.0.1"
	// DefaultPort is the client port used when Config.Port is 0. It is
	// intentionally not 4222 so it never clashes with a system NATS server.
	DefaultPort = 4322

	readyTimeout = 10 * time.Second
)

// Config describes the embedded server. The zero value is usable.
type Config struct {
	// Host is the interface to listen on; "" means DefaultHost.
	Host string
	// Port is the client port; 0 means DefaultPort and -1 picks a free port.
	Port int
	// StoreDir is the JetStream file storage directory. "" means a fresh
	// temporary directory that is removed by Shutdown.
	StoreDir string
}

// Server is a running in-process NATS server with JetStream enabled.
type Server struct {
	ns      *natsserver.Server
	url     string
	tempDir string
	once    sync.Once
}

// Start launches nats-server in-process with JetStream on file storage and
// returns once it accepts client connections. If the port is already bound it
// returns a one-line error naming the address.
func Start(cfg Config) (*Server, error) {
	host := cfg.Host
	if host == "" {
		host = DefaultHost
	}
	port := cfg.Port
	if port == 0 {
		port = DefaultPort
	}
	if port < -1 || port > 65535 {
		return nil, fmt.Errorf("nats: invalid port %d", port)
	}
	hostPort := net.JoinHostPort(host, strconv.Itoa(port))
	if port > 0 {
		if err := probePort(hostPort); err != nil {
			return nil, err
		}
	}

	storeDir, tempDir := cfg.StoreDir, ""
	if storeDir == "" {
		dir, err := os.MkdirTemp("", "courier-nats-*")
		if err != nil {
			return nil, fmt.Errorf("nats: creating temporary store dir: %w", err)
		}
		storeDir, tempDir = dir, dir
	} else if err := os.MkdirAll(storeDir, 0o755); err != nil {
		return nil, fmt.Errorf("nats: creating store dir: %w", err)
	}
	cleanup := func() {
		if tempDir != "" {
			_ = os.RemoveAll(tempDir)
		}
	}

	ns, err := natsserver.NewServer(&natsserver.Options{
		Host:      host,
		Port:      port,
		JetStream: true,
		StoreDir:  storeDir,
		NoSigs:    true,
		NoLog:     true,
	})
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("nats: %w", err)
	}
	// Without a logger nats-server silently drops fatal conditions (for
	// example a failed listen); capture them so Start can report them.
	logs := &fatalRecorder{}
	ns.SetLogger(logs, false, false)
	ns.Start()

	deadline := time.Now().Add(readyTimeout)
	for !ns.ReadyForConnections(100 * time.Millisecond) {
		if msg := logs.fatal(); msg != "" || time.Now().After(deadline) {
			ns.Shutdown()
			ns.WaitForShutdown()
			cleanup()
			switch {
			case msg == "":
				return nil, fmt.Errorf("nats: server on %s not ready after %s", hostPort, readyTimeout)
			case logs.listenFailed():
				return nil, portInUse(hostPort)
			default:
				return nil, fmt.Errorf("nats: %s", msg)
			}
		}
	}
	if msg := logs.fatal(); msg != "" || !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		cleanup()
		if msg == "" {
			msg = "JetStream did not start"
		}
		return nil, fmt.Errorf("nats: %s", msg)
	}

	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		ns.Shutdown()
		ns.WaitForShutdown()
		cleanup()
		return nil, errors.New("nats: server has no client listener")
	}
	return &Server{
		ns:      ns,
		url:     "nats://" + net.JoinHostPort(host, strconv.Itoa(addr.Port)),
		tempDir: tempDir,
	}, nil
}

// URL returns the client URL, e.g. nats://127.0.0.1:4322.
func (s *Server) URL() string { return s.url }

// Shutdown stops the server gracefully, flushing JetStream to disk, and waits
// until it has fully stopped. A temporary store directory is removed. It is
// safe to call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
	})
}

func probePort(hostPort string) error {
	l, err := net.Listen("tcp", hostPort)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return portInUse(hostPort)
		}
		return fmt.Errorf("nats: cannot listen on %s: %w", hostPort, err)
	}
	return l.Close()
}

func portInUse(hostPort string) error {
	return fmt.Errorf("nats: port %s is already in use (set --nats-port)", hostPort)
}

// fatalRecorder is a nats-server logger that discards everything except fatal
// messages, which it keeps for Start to report.
type fatalRecorder struct {
	mu     sync.Mutex
	msg    string
	listen bool
}

func (r *fatalRecorder) Fatalf(format string, v ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msg == "" {
		r.msg = fmt.Sprintf(format, v...)
		for _, a := range v {
			if err, ok := a.(error); ok && errors.Is(err, syscall.EADDRINUSE) {
				r.listen = true
			}
		}
	}
}

func (r *fatalRecorder) fatal() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg
}

func (r *fatalRecorder) listenFailed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listen
}

func (*fatalRecorder) Noticef(string, ...any) {}
func (*fatalRecorder) Warnf(string, ...any)   {}
func (*fatalRecorder) Errorf(string, ...any)  {}
func (*fatalRecorder) Debugf(string, ...any)  {}
func (*fatalRecorder) Tracef(string, ...any)  {}
