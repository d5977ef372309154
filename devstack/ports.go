package devstack

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// checkPortFree fails with a one-line, user-facing error when host:port
// cannot be bound. flag names the command-line flag that changes the port.
func checkPortFree(what, host string, port int, flag string) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s: port %s is already in use (set %s)", what, addr, flag)
		}
		return fmt.Errorf("%s: cannot listen on %s: %w", what, addr, err)
	}
	return l.Close()
}

// freePorts returns n distinct ports on host that were free a moment ago.
// All listeners are held open until every port is chosen so the kernel cannot
// hand out the same port twice.
func freePorts(host string, n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("temporal: finding a free port on %s: %w", host, err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
