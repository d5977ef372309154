package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/internal/defaults"
)

// Defaults applied by Start to zero-valued Config fields.
const (
	DefaultHost          = "127.0.0.1"
	DefaultHistoryShards = 8
	DefaultNamespace     = "courier"
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultWorkers       = 2
	DefaultGateways      = 2
)

// Config describes one topology.
type Config struct {
	// Dir holds everything the topology writes: both PostgreSQL data directories, NATS's
	// JetStream files, the dynamic config, the API key and a log file per process (Dir/logs).
	// Started again on the same Dir, the topology keeps its data. Required.
	Dir string
	// Binaries are the programs to run (Build makes them). Required.
	Binaries Binaries
	// Host is the address every server listens on; default DefaultHost.
	Host string
	// HistoryShards is Temporal's history shard count, fixed for the life of Dir; default
	// DefaultHistoryShards.
	HistoryShards int
	// Namespace is created with Retention and courier's search attributes; defaults
	// DefaultNamespace and DefaultRetention.
	Namespace string
	Retention time.Duration
	// Workers and Gateways are how many `courier worker` and `courier gateway` processes run;
	// defaults DefaultWorkers and DefaultGateways.
	Workers, Gateways int
	// The ports people and tests connect to; 0 picks a free one. GatewayPorts and WorkerPorts
	// are taken in order, free ports filling in for missing entries.
	FrontendPort, UIPort, NATSPort int
	GatewayPorts, WorkerPorts      []int
	// DisableUI runs without the Temporal UI.
	DisableUI bool
	// TemporalOnly runs Temporal, its database and the UI alone: no NATS, no courier database,
	// workers or gateways (for `courier bench --temporal-address`, whose courier runs in the
	// bench's process).
	TemporalOnly bool
	// CourierEnv is added to the environment of every courier worker and gateway (KEY=VALUE),
	// after the topology's own settings, so it can override them.
	CourierEnv []string
	// Progress receives a line for each step while the topology starts; optional.
	Progress func(string)
}

// Cluster is a running topology. Its processes can be killed and started again (Restart);
// Stop ends them all.
type Cluster struct {
	cfg        Config
	TemporalDB *Postgres        // Temporal's persistence and visibility databases
	AppDB      *Postgres        // courier's database (AppDatabase)
	Temporal   map[string]*Proc // by service: history, matching, frontend, worker
	Workers    []*Proc          // courier worker
	Gateways   []*Proc          // courier gateway
	frontend   string
	temporalGR map[string]string // service → gRPC address
	nats       *embeddednats.Server
	ui         *ui
	gateways   []string // base URLs
	workers    []string // base URLs (/healthz, /metrics)
	pprof      map[string]string
	apiKey     string
}

// AppDatabase is the name of courier's database on AppDB.
const AppDatabase = "courier"

func (cfg *Config) defaults() error {
	if cfg.Dir == "" {
		return errors.New("cluster: Dir is required")
	}
	if cfg.Binaries.TemporalServer == "" || cfg.Binaries.SQLTool == "" || cfg.Binaries.Courier == "" {
		return errors.New("cluster: Binaries are required (cluster.Build)")
	}
	defaults.IfZero(&cfg.Host, DefaultHost)
	defaults.IfZero(&cfg.HistoryShards, DefaultHistoryShards)
	defaults.IfZero(&cfg.Namespace, DefaultNamespace)
	defaults.IfZero(&cfg.Retention, DefaultRetention)
	defaults.IfZero(&cfg.Workers, DefaultWorkers)
	defaults.IfZero(&cfg.Gateways, DefaultGateways)
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	if cfg.TemporalOnly {
		cfg.Workers, cfg.Gateways = 0, 0
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	cfg.Dir = abs
	return nil
}

// Start starts the whole topology and returns once every part answers: both PostgreSQL
// instances, Temporal's four services with their schemas and the namespace, NATS, the UI,
// courier's migrations, its workers and its gateways. On an error it stops what it started.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	pgBin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	logs := filepath.Join(cfg.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{cfg: cfg, Temporal: map[string]*Proc{}, temporalGR: map[string]string{}, pprof: map[string]string{}}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	ports := &portPicker{host: cfg.Host}
	fixed := func(what string, p int) int {
		if p != 0 {
			ports.fixed(what, p)
			return p
		}
		return ports.free()
	}
	frontendPort := fixed("temporal frontend", cfg.FrontendPort)
	uiPort := 0
	if !cfg.DisableUI {
		uiPort = fixed("temporal ui", cfg.UIPort)
	}
	natsPort := 0
	if !cfg.TemporalOnly {
		natsPort = fixed("nats", cfg.NATSPort)
	}
	gwPorts := make([]int, cfg.Gateways)
	for i := range gwPorts {
		p := 0
		if i < len(cfg.GatewayPorts) {
			p = cfg.GatewayPorts[i]
		}
		gwPorts[i] = fixed(fmt.Sprintf("gateway %d", i+1), p)
	}
	wkPorts := make([]int, cfg.Workers)
	for i := range wkPorts {
		p := 0
		if i < len(cfg.WorkerPorts) {
			p = cfg.WorkerPorts[i]
		}
		wkPorts[i] = fixed(fmt.Sprintf("worker %d", i+1), p)
	}
	tports := map[string]temporalPorts{}
	for _, svc := range TemporalServices {
		tp := temporalPorts{GRPC: ports.free(), Membership: ports.free(), PProf: ports.free(), Metrics: ports.free()}
		if svc == "frontend" {
			tp.GRPC, tp.HTTP = frontendPort, ports.free()
		}
		tports[svc] = tp
	}
	pgTemporalPort, pgAppPort := ports.free(), ports.free()

	if err := ports.err(); err != nil {
		return nil, err
	}

	cfg.Progress("starting PostgreSQL for Temporal")
	c.TemporalDB, err = startPostgres(ctx, postgresConfig{name: "postgres-temporal", clusterName: "temporal", dir: filepath.Join(cfg.Dir, "postgres-temporal"),
		binDir: pgBin, host: cfg.Host, port: pgTemporalPort, maxConnections: 300, logDir: logs})
	if err != nil {
		return c, err
	}

	cfg.Progress("applying Temporal's PostgreSQL schemas (persistence and visibility)")
	if err := setupTemporalSchema(ctx, cfg.Binaries.SQLTool, c.TemporalDB, filepath.Join(logs, "temporal-sql-tool.log")); err != nil {
		return c, err
	}
	dcPath := filepath.Join(cfg.Dir, "temporal-dynamicconfig.yaml")
	if err := os.WriteFile(dcPath, DynamicConfig, 0o644); err != nil {
		return c, err
	}
	for _, svc := range TemporalServices {
		cfg.Progress("starting Temporal " + svc)
		p := &Proc{Name: "temporal-" + svc, path: cfg.Binaries.TemporalServer, args: []string{"start", "--service", svc},
			env: temporalEnv(svc, c.TemporalDB, cfg.HistoryShards, tports, dcPath, cfg.Host), logPath: filepath.Join(logs, "temporal-"+svc+".log")}
		c.Temporal[svc] = p
		c.temporalGR[svc] = hostPort(cfg.Host, tports[svc].GRPC)
		c.pprof[p.Name] = "http://" + hostPort(cfg.Host, tports[svc].PProf) + "/debug/pprof/"
		if err := p.Start(); err != nil {
			return c, err
		}
		if err := waitListening(ctx, p, c.temporalGR[svc], 2*time.Minute); err != nil {
			return c, err
		}
	}
	c.frontend = c.temporalGR["frontend"]
	cfg.Progress("creating namespace " + cfg.Namespace + " with courier's retention and search attributes")
	if err := setupNamespace(ctx, c.Temporal["frontend"], c.frontend, cfg.Namespace, cfg.Retention); err != nil {
		return c, err
	}

	if !cfg.DisableUI {
		cfg.Progress("starting the Temporal UI")
		if c.ui, err = startUI(cfg.Host, uiPort, c.frontend, cfg.Namespace); err != nil {
			return c, err
		}
		if err := waitHTTP(ctx, nil, c.ui.url+"/", time.Minute); err != nil {
			return c, fmt.Errorf("temporal ui: %w", err)
		}
	}
	if cfg.TemporalOnly {
		return c, nil
	}

	cfg.Progress("starting PostgreSQL for courier")
	c.AppDB, err = startPostgres(ctx, postgresConfig{name: "postgres-app", clusterName: "courier", dir: filepath.Join(cfg.Dir, "postgres-app"),
		binDir: pgBin, host: cfg.Host, port: pgAppPort, maxConnections: 200, logDir: logs})
	if err != nil {
		return c, err
	}
	cfg.Progress("starting NATS (JetStream)")
	c.nats, err = embeddednats.Start(embeddednats.Config{Host: cfg.Host, Port: natsPort, StoreDir: filepath.Join(cfg.Dir, "nats")})
	if err != nil {
		return c, err
	}

	cfg.Progress("migrating courier's database")
	if _, err := c.AppDB.CreateDatabase(ctx, AppDatabase); err != nil {
		return c, err
	}
	for i := range gwPorts {
		c.gateways = append(c.gateways, "http://"+hostPort(cfg.Host, gwPorts[i]))
	}
	for i := range wkPorts {
		c.workers = append(c.workers, "http://"+hostPort(cfg.Host, wkPorts[i]))
	}
	base := withEnv(os.Environ(), courierEnv(c.frontend, cfg.Namespace, c.AppDB.URL(AppDatabase), c.nats.URL(), c.gateways[0]))
	if err := runLogged(ctx, filepath.Join(logs, "courier-migrate.log"), cfg.Binaries.Courier, "migrate", "--database-url", c.AppDB.URL(AppDatabase)); err != nil {
		return c, fmt.Errorf("courier migrate: %w (see %s)", err, filepath.Join(logs, "courier-migrate.log"))
	}
	if c.apiKey, err = c.ensureAPIKey(ctx); err != nil {
		return c, err
	}

	if err := c.startCourier(ctx, "worker", wkPorts, base, logs, &c.Workers); err != nil {
		return c, err
	}
	return c, c.startCourier(ctx, "gateway", gwPorts, base, logs, &c.Gateways)
}

// startCourier starts one `courier <command>` process a port, named courier-<command>-<n>, on
// the environment base (plus its own COURIER_HTTP_ADDR and CourierEnv), adding each to procs
// before it waits for it to answer.
func (c *Cluster) startCourier(ctx context.Context, command string, ports []int, base []string, logs string, procs *[]*Proc) error {
	for i, port := range ports {
		name := fmt.Sprintf("courier-%s-%d", command, i+1)
		c.cfg.Progress("starting " + name)
		p := &Proc{Name: name, path: c.cfg.Binaries.Courier, args: []string{command},
			env:     withEnv(base, append([]string{"COURIER_HTTP_ADDR=" + hostPort(c.cfg.Host, port)}, c.cfg.CourierEnv...)),
			logPath: filepath.Join(logs, name+".log")}
		*procs = append(*procs, p)
		if err := c.Restart(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// courierEnv is what every courier worker and gateway is told (on top of the environment the
// orchestrator inherited): where Temporal, the database and NATS are, the gateway's URL for
// task pushes, and that callbacks and pushes may reach this machine's loopback address, where
// a local topology's receivers and task workers listen. Each process also gets its own
// COURIER_HTTP_ADDR.
func courierEnv(frontend, namespace, databaseURL, natsURL, publicURL string) []string {
	return []string{
		"TEMPORAL_ADDRESS=" + frontend,
		"TEMPORAL_NAMESPACE=" + namespace,
		"DATABASE_URL=" + databaseURL,
		"NATS_URL=" + natsURL,
		"COURIER_PUBLIC_URL=" + publicURL,
		loopbackOnly + "=true",
	}
}

// loopbackOnly is the setting only a topology on one machine needs.
const loopbackOnly = "COURIER_ALLOW_LOOPBACK"

// withEnv is env with the KEY=VALUE entries of set added, replacing earlier ones of the same key.
func withEnv(env, set []string) []string {
	keys := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

// ensureAPIKey returns the admin key kept in Dir/api-key, creating it with `courier apikey
// create` on first use.
func (c *Cluster) ensureAPIKey(ctx context.Context) (string, error) {
	path := filepath.Join(c.cfg.Dir, "api-key")
	if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b)), nil
	}
	cmd := exec.CommandContext(ctx, c.cfg.Binaries.Courier, "apikey", "create", "--name", "cluster", "--scopes", "admin",
		"--database-url", c.AppDB.URL(AppDatabase))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("courier apikey create: %w\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "key:"); ok {
			key := strings.TrimSpace(v)
			return key, os.WriteFile(path, []byte(key+"\n"), 0o600)
		}
	}
	return "", fmt.Errorf("courier apikey create printed no key:\n%s", out)
}

// Restart starts p (a process of this topology that is not running) and waits until it
// answers: a Temporal service's gRPC port, a worker's /healthz, a gateway's /readyz.
func (c *Cluster) Restart(ctx context.Context, p *Proc) error {
	if err := p.Start(); err != nil {
		return err
	}
	for svc, tp := range c.Temporal {
		if tp == p {
			return waitListening(ctx, p, c.temporalGR[svc], 2*time.Minute)
		}
	}
	for i, w := range c.Workers {
		if w == p {
			return waitHTTP(ctx, p, c.workers[i]+"/healthz", 2*time.Minute)
		}
	}
	for i, g := range c.Gateways {
		if g == p {
			return waitHTTP(ctx, p, c.gateways[i]+"/readyz", 2*time.Minute)
		}
	}
	return nil
}

// Stop stops every process, courier's first, then Temporal's, then the databases; each gets
// a bounded time to exit before it is killed. Calling it again does nothing more.
func (c *Cluster) Stop() {
	for _, p := range c.Gateways {
		p.Stop(20 * time.Second)
	}
	for _, p := range c.Workers {
		p.Stop(20 * time.Second)
	}
	for _, svc := range []string{"frontend", "worker", "matching", "history"} {
		if p := c.Temporal[svc]; p != nil {
			p.Stop(30 * time.Second)
		}
	}
	if c.ui != nil {
		c.ui.stop()
		c.ui = nil
	}
	if c.nats != nil {
		c.nats.Shutdown()
		c.nats = nil
	}
	for _, pg := range []*Postgres{c.AppDB, c.TemporalDB} {
		if pg != nil {
			pg.Proc.Stop(time.Minute)
		}
	}
}

// Exited returns the first of the topology's processes to exit, or nil when ctx ends first.
func (c *Cluster) Exited(ctx context.Context) *Proc {
	procs := c.Procs()
	first := make(chan *Proc, len(procs))
	stop := make(chan struct{})
	defer close(stop)
	for _, p := range procs {
		go func(p *Proc, done <-chan struct{}) {
			select {
			case <-done:
				first <- p
			case <-stop:
			}
		}(p, p.Done())
	}
	select {
	case p := <-first:
		return p
	case <-ctx.Done():
		return nil
	}
}

// Procs lists every process of the topology.
func (c *Cluster) Procs() []*Proc {
	var out []*Proc
	for _, pg := range []*Postgres{c.TemporalDB, c.AppDB} {
		if pg != nil {
			out = append(out, pg.Proc)
		}
	}
	for _, svc := range TemporalServices {
		if p := c.Temporal[svc]; p != nil {
			out = append(out, p)
		}
	}
	out = append(out, c.Workers...)
	return append(out, c.Gateways...)
}

// Frontend is the Temporal frontend's gRPC address (TEMPORAL_ADDRESS).
func (c *Cluster) Frontend() string { return c.frontend }

// Namespace is the Temporal namespace courier uses.
func (c *Cluster) Namespace() string { return c.cfg.Namespace }

// GatewayURLs are the gateways' base URLs, in the order of Gateways.
func (c *Cluster) GatewayURLs() []string { return c.gateways }

// WorkerURLs are the workers' metrics and health base URLs, in the order of Workers.
func (c *Cluster) WorkerURLs() []string { return c.workers }

// UIURL is the Temporal UI's base URL ("" when disabled).
func (c *Cluster) UIURL() string {
	if c.ui == nil {
		return ""
	}
	return c.ui.url
}

// NATSURL is the NATS server's URL (the broker "default").
func (c *Cluster) NATSURL() string { return c.nats.URL() }

// APIKey is an admin API key, kept in Dir/api-key.
func (c *Cluster) APIKey() string { return c.apiKey }

// PProf maps each Temporal process's name to its pprof base URL.
func (c *Cluster) PProf() map[string]string { return c.pprof }

// Describe says where everything is, for people.
func (c *Cluster) Describe() string {
	var b strings.Builder
	if len(c.gateways) > 0 {
		fmt.Fprintf(&b, "  gateways     %s   (OpenAPI: …/openapi.yaml, metrics: …/metrics)\n", strings.Join(c.gateways, ", "))
		fmt.Fprintf(&b, "  workers      %s   (/healthz, /metrics)\n", strings.Join(c.workers, ", "))
	}
	if c.ui != nil {
		fmt.Fprintf(&b, "  Temporal UI  %s   (namespace %s)\n", c.ui.url, c.cfg.Namespace)
	}
	fmt.Fprintf(&b, "  Temporal     %s   (frontend; %d history shards; history %s, matching %s, worker %s)\n", c.frontend,
		c.cfg.HistoryShards, c.temporalGR["history"], c.temporalGR["matching"], c.temporalGR["worker"])
	fmt.Fprintf(&b, "  pprof        history %s, matching %s, frontend %s\n", c.pprof["temporal-history"], c.pprof["temporal-matching"], c.pprof["temporal-frontend"])
	fmt.Fprintf(&b, "  databases    Temporal %s, %s\n", c.TemporalDB.URL(TemporalSettings["DBNAME"]), c.TemporalDB.URL(TemporalSettings["VISIBILITY_DBNAME"]))
	if c.AppDB != nil {
		fmt.Fprintf(&b, "               courier %s\n", c.AppDB.URL(AppDatabase))
		fmt.Fprintf(&b, "  NATS         %s   (broker \"default\")\n", c.nats.URL())
	}
	fmt.Fprintf(&b, "  logs         %s\n", filepath.Join(c.cfg.Dir, "logs"))
	if c.apiKey != "" {
		fmt.Fprintf(&b, "  API key      %s   (admin; kept in %s)\n", c.apiKey, filepath.Join(c.cfg.Dir, "api-key"))
	}
	return b.String()
}

// waitHTTP waits until url answers 200, failing at once if p (when given) exits.
func waitHTTP(ctx context.Context, p *Proc, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	var exited <-chan struct{}
	if p != nil {
		exited = p.Done()
	}
	var lastErr error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		lastErr = err
		select {
		case <-exited:
			return fmt.Errorf("%s exited while starting (see %s): %v", p.Name, p.LogPath(), p.ExitErr())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w", url, timeout, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// portPicker hands out ports: fixed ones are checked free, free ones are held open until the
// last is chosen so the kernel never hands out one twice.
type portPicker struct {
	host string
	held []net.Listener
	errs []error
}

func (pp *portPicker) fixed(what string, port int) {
	l, err := net.Listen("tcp", hostPort(pp.host, port))
	if err != nil {
		pp.errs = append(pp.errs, fmt.Errorf("%s: port %d is taken: %w", what, port, err))
		return
	}
	pp.held = append(pp.held, l)
}

func (pp *portPicker) free() int {
	// Below the kernel's ephemeral range (32768 and up on Linux): Temporal keeps each host's
	// membership port in a SMALLINT column, and a port there is never taken by an outgoing
	// connection between our check and the server's bind.
	for range 200 {
		port := lowPortMin + rand.IntN(lowPortMax-lowPortMin+1)
		l, err := net.Listen("tcp", hostPort(pp.host, port))
		if err != nil {
			continue
		}
		pp.held = append(pp.held, l)
		return port
	}
	pp.errs = append(pp.errs, fmt.Errorf("no free port on %s between %d and %d", pp.host, lowPortMin, lowPortMax))
	return 0
}

// The range free ports are picked from.
const lowPortMin, lowPortMax = 20000, 32767

// err releases every held port and reports what could not be had.
func (pp *portPicker) err() error {
	for _, l := range pp.held {
		l.Close()
	}
	pp.held = nil
	return errors.Join(pp.errs...)
}
