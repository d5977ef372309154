package cluster

import (
	"fmt"
	"net"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

// ui is the Temporal UI server (the ui-server module, the one courier dev embeds), run inside
// the orchestrator's process and pointed at the frontend.
type ui struct {
	srv  *uiserver.Server
	done chan struct{}
	url  string
}

// startUI serves the UI on host:port. The UI server exits the whole process when it cannot
// bind, so the port is checked first.
func startUI(host string, port int, frontend, namespace string) (*ui, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("temporal ui: cannot listen on %s: %w", addr, err)
	}
	l.Close()
	u := &ui{url: "http://" + addr, done: make(chan struct{})}
	u.srv = uiserver.NewServer(uioptions.WithConfigProvider(&uiconfig.Config{
		Host:                host,
		Port:                port,
		TemporalGRPCAddress: frontend,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		CORS:                uiconfig.CORS{CookieInsecure: true},
		HideLogs:            true,
		DisableNewsFetch:    true,
	}))
	go func() {
		defer close(u.done)
		_ = u.srv.Start()
	}()
	return u, nil
}

func (u *ui) stop() {
	u.srv.Stop()
	select {
	case <-u.done:
	case <-time.After(5 * time.Second):
	}
}
