package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/courier-oss/courier/internal/defaults"
)

// Defaults applied by StartTemporal to zero-valued Config fields.
const (
	DefaultHost         = "127.0.0.1"
	DefaultTemporalPort = 7233
	DefaultUIPort       = 8233
	DefaultNamespace    = "courier"
	DefaultRetention    = 7 * 24 * time.Hour
	// MinRetention is the shortest retention the Temporal server accepts for a
	// local namespace.
	MinRetention = 24 * time.Hour
)

const (
	dbFileName = "temporal.db"
	// visibilityFileName holds the visibility store (what lists and filters runs) of data
	// directories created since it was split out: SQLite takes one writer per file, so the
	// visibility writes each state change makes no longer wait behind the history writes.
	visibilityFileName = "temporal-visibility.db"
	clusterName        = "active"

	frontendReadyTimeout = 60 * time.Second
	uiReadyTimeout       = 30 * time.Second
	saReadyTimeout       = 15 * time.Second
	// namespaceRefresh is how often each Temporal service reloads namespaces
	// (system.namespaceCacheRefreshInterval, which we leave at its default).
	namespaceRefresh = 2 * time.Second
	stopTimeout      = 30 * time.Second

	// logOff is above every slog level, so nothing is forwarded.
	logOff = slog.LevelError + 100
)

// Config configures the embedded Temporal server and Web UI.
type Config struct {
	// DataDir holds the server's state: the SQLite databases
	// DataDir/temporal.db (history) and DataDir/temporal-visibility.db
	// (visibility; in temporal.db for data dirs created before it). Required.
	// It is created if missing.
	DataDir string
	// Host is the interface every listener binds to; default DefaultHost.
	Host string
	// TemporalPort is the frontend gRPC port; 0 means DefaultTemporalPort and
	// -1 picks a free port.
	TemporalPort int
	// UIPort is the Web UI HTTP port; 0 means DefaultUIPort and -1 picks a
	// free port. Use DisableUI to run without the UI.
	UIPort int
	// DisableUI turns the Web UI off.
	DisableUI bool
	// Namespace is created if missing; default DefaultNamespace.
	Namespace string
	// Retention is the namespace's workflow retention, applied on every
	// start; default DefaultRetention, must be at least MinRetention.
	Retention time.Duration
	// SearchAttributes are custom search attributes registered on the
	// namespace on every start (existing ones are left alone).
	SearchAttributes map[string]enumspb.IndexedValueType
	// Logger receives the server's warnings and errors; lower levels are
	// dropped. Default: warnings and errors as text on stderr.
	Logger *slog.Logger
	// DynamicConfig holds extra Temporal dynamic config values keyed by
	// setting name (e.g. "limit.maxIDLength"); they override devstack's own.
	DynamicConfig map[string]any
	// Durable makes SQLite sync its write-ahead log on every commit
	// (synchronous=FULL), so a write the server has acknowledged survives a
	// power cut or an OS crash as well. The default, false, syncs only at
	// checkpoints (synchronous=NORMAL): a process crash (SIGKILL) still loses
	// nothing, a power cut or kernel panic can lose the last commits.
	Durable bool
}

// Temporal is a running in-process Temporal server (and Web UI).
type Temporal struct {
	server    temporal.Server
	ui        *uiserver.Server
	uiDone    chan struct{}
	address   string
	namespace string
	uiURL     string
	logger    *slog.Logger
	logLevel  *slog.LevelVar // minimum level forwarded from the server
	stopOnce  sync.Once
}

// StartTemporal starts a Temporal server with all services in this process,
// backed by the SQLite files in DataDir, plus the Web UI unless disabled. It returns
// once the frontend answers, the namespace has the configured retention and
// search attributes, and the UI serves pages. Port conflicts on TemporalPort
// or UIPort are reported before anything is started. ctx bounds the startup
// only; use Stop to shut down.
func StartTemporal(ctx context.Context, cfg Config) (*Temporal, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("temporal: %w", err)
	}

	// The UI server terminates the process if it cannot bind, so every fixed
	// port is checked before anything starts.
	if cfg.TemporalPort > 0 {
		if err := checkPortFree("temporal", cfg.Host, cfg.TemporalPort, "--temporal-port"); err != nil {
			return nil, err
		}
	}
	if !cfg.DisableUI && cfg.UIPort > 0 {
		if err := checkPortFree("temporal ui", cfg.Host, cfg.UIPort, "--ui-port"); err != nil {
			return nil, err
		}
	}

	// Internal services (history, matching, worker) and the frontend's HTTP
	// API each get their own port, as do -1 ports.
	need := 4
	if cfg.TemporalPort < 0 {
		need++
	}
	if !cfg.DisableUI && cfg.UIPort < 0 {
		need++
	}
	ports, err := freePorts(cfg.Host, need)
	if err != nil {
		return nil, err
	}
	historyPort, matchingPort, workerPort, httpPort := ports[0], ports[1], ports[2], ports[3]
	ports = ports[4:]
	if cfg.TemporalPort < 0 {
		cfg.TemporalPort, ports = ports[0], ports[1:]
	}
	if !cfg.DisableUI && cfg.UIPort < 0 {
		cfg.UIPort = ports[0]
	}

	sqlCfg, visCfg, err := prepareDatabase(cfg)
	if err != nil {
		return nil, err
	}

	t := &Temporal{
		address:   hostPort(cfg.Host, cfg.TemporalPort),
		namespace: cfg.Namespace,
		logger:    cfg.Logger,
		logLevel:  new(slog.LevelVar),
	}
	t.logLevel.Set(slog.LevelWarn)

	srv, err := newServer(cfg, sqlCfg, visCfg, t.logLevel, t.address, hostPort(cfg.Host, httpPort), map[primitives.ServiceName]int{
		primitives.FrontendService: cfg.TemporalPort,
		primitives.HistoryService:  historyPort,
		primitives.MatchingService: matchingPort,
		primitives.WorkerService:   workerPort,
	})
	if err != nil {
		return nil, err
	}

	// Bind the UI first: its port was checked a moment ago and the UI server
	// exits the process on a bind failure, so keep that window small.
	if !cfg.DisableUI {
		t.startUI(cfg)
	}

	if err := srv.Start(); err != nil {
		t.stopUI()
		return nil, fmt.Errorf("temporal: starting server: %w", err)
	}
	t.server = srv

	if err := t.setup(ctx, cfg); err != nil {
		t.Stop()
		return nil, err
	}
	return t, nil
}

// Address returns the frontend gRPC address (host:port) for SDK clients.
func (t *Temporal) Address() string { return t.address }

// Namespace returns the namespace prepared for courier.
func (t *Temporal) Namespace() string { return t.namespace }

// UIURL returns the Web UI base URL, e.g. http://127.0.0.1:8233, or "" when
// the UI is disabled.
func (t *Temporal) UIURL() string { return t.uiURL }

// Stop shuts down the UI and then the server. It gives up waiting after a
// bounded time so a wedged service cannot hang the caller. Calling Stop more
// than once is safe.
func (t *Temporal) Stop() {
	t.stopOnce.Do(func() {
		t.stopUI()
		if t.server == nil {
			return
		}
		// While shutting down, the server logs dozens of warnings and
		// errors about polls and dials its own shutdown cancels, and some
		// of its internal pollers keep retrying after Stop returns. None of
		// that is actionable, so the server's log is muted from here on; a
		// real failure still surfaces as Stop's error below.
		t.logLevel.Set(logOff)
		done := make(chan error, 1)
		go func() { done <- t.server.Stop() }()
		select {
		case err := <-done:
			if err != nil {
				t.logger.Warn("temporal: stopping server", "error", err)
			}
		case <-time.After(stopTimeout):
			t.logger.Warn("temporal: server did not stop in time; abandoning it", "timeout", stopTimeout)
		}
	})
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.DataDir == "" {
		return cfg, errors.New("temporal: DataDir is required")
	}
	if strings.ContainsAny(cfg.DataDir, "?#") {
		// The path becomes part of a SQLite URI.
		return cfg, fmt.Errorf("temporal: DataDir %q must not contain '?' or '#'", cfg.DataDir)
	}
	defaults.IfZero(&cfg.Host, DefaultHost)
	defaults.IfZero(&cfg.TemporalPort, DefaultTemporalPort)
	defaults.IfZero(&cfg.UIPort, DefaultUIPort)
	for _, p := range []struct {
		name string
		port int
	}{{"TemporalPort", cfg.TemporalPort}, {"UIPort", cfg.UIPort}} {
		if p.port < -1 || p.port > 65535 {
			return cfg, fmt.Errorf("temporal: invalid %s %d", p.name, p.port)
		}
	}
	if !cfg.DisableUI && cfg.TemporalPort > 0 && cfg.TemporalPort == cfg.UIPort {
		return cfg, fmt.Errorf("temporal: TemporalPort and UIPort are both %d", cfg.TemporalPort)
	}
	defaults.IfZero(&cfg.Namespace, DefaultNamespace)
	defaults.IfZero(&cfg.Retention, DefaultRetention)
	if cfg.Retention < MinRetention {
		return cfg, fmt.Errorf("temporal: retention %s is below the minimum of %s", cfg.Retention, MinRetention)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return cfg, nil
}

// prepareDatabase creates the SQLite schema on first use and makes sure the
// namespace row exists; both run before the server opens the files. It returns
// the history store's configuration and the visibility store's: a file of its
// own for a new data directory, the history file in one created before the
// split (its runs stay listed).
func prepareDatabase(cfg Config) (store, visibility *config.SQL, err error) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("temporal: resolving DataDir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("temporal: creating DataDir: %w", err)
	}
	sqlConfig := func(name string) *config.SQL {
		return &config.SQL{
			PluginName:        sqliteplugin.PluginName,
			DatabaseName:      filepath.Join(dataDir, name),
			ConnectAttributes: sqliteAttributes(cfg.Durable),
		}
	}
	store = sqlConfig(dbFileName)
	fresh, err := ensureSchema(store)
	if err != nil {
		return nil, nil, err
	}
	visibility = store
	if _, err := os.Stat(filepath.Join(dataDir, visibilityFileName)); fresh || err == nil {
		visibility = sqlConfig(visibilityFileName)
		if _, err := ensureSchema(visibility); err != nil {
			return nil, nil, err
		}
	}

	// Creating the namespace directly in the database (a no-op when it
	// exists) means it is present in every service's cache from the start.
	// Search attributes given here are usable immediately on a fresh
	// database; later additions go through the operator API in setup.
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, cfg.Namespace, false, cfg.SearchAttributes)
	if err != nil {
		return nil, nil, fmt.Errorf("temporal: namespace %q: %w", cfg.Namespace, err)
	}
	if err := sqliteschema.CreateNamespaces(store, ns); err != nil {
		return nil, nil, fmt.Errorf("temporal: creating namespace %q: %w", cfg.Namespace, err)
	}
	return store, visibility, nil
}

// ensureSchema creates Temporal's schema in a missing or empty database file and tells
// whether it did.
func ensureSchema(c *config.SQL) (created bool, err error) {
	path := c.DatabaseName
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.Size() > 0:
		return false, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return false, fmt.Errorf("temporal: %w", err)
	}
	if err := sqliteschema.SetupSchema(c); err != nil {
		// A half-initialised file would be skipped next time; remove it so a
		// retry starts clean.
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
		return false, fmt.Errorf("temporal: creating schema in %s: %w", path, err)
	}
	return true, nil
}

// queueCheckpoint is how often the history service's queues drop the tasks they have done.
const queueCheckpoint = 3 * time.Second

// sqliteAttributes are the SQLite plugin's connect attributes: URI parameters
// ("mode") and, for every other key, a pragma run on each new connection.
// With WAL, synchronous=NORMAL syncs the log at checkpoints instead of at
// every commit; a commit is still atomic and survives the process dying, but
// the last ones can be lost if the machine loses power (see
// docs/deployment.md). Durable restores FULL.
func sqliteAttributes(durable bool) map[string]string {
	sync := "NORMAL"
	if durable {
		sync = "FULL"
	}
	return map[string]string{
		"mode":         "rwc",
		"journal_mode": "wal",
		"synchronous":  sync,
		"busy_timeout": "10000",
	}
}

func newServer(cfg Config, sqlCfg, visCfg *config.SQL, logLevel *slog.LevelVar, frontendAddr, httpAddr string, grpcPorts map[primitives.ServiceName]int) (temporal.Server, error) {
	const store, visibility = "sqlite", "sqlite-visibility"
	conf := &config.Config{}
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = cfg.Host
	conf.Persistence.DefaultStore = store
	conf.Persistence.VisibilityStore = visibility
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{store: {SQL: sqlCfg}, visibility: {SQL: visCfg}}
	conf.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             frontendAddr,
				HTTPAddress:            httpAddr,
			},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = frontendAddr

	conf.Services = make(map[string]config.Service, len(grpcPorts))
	hosts := make(map[primitives.ServiceName]static.Hosts, len(grpcPorts))
	for name, port := range grpcPorts {
		svc := config.Service{}
		svc.RPC.GRPCPort = port
		svc.RPC.BindOnIP = cfg.Host
		if name == primitives.FrontendService {
			_, p, _ := net.SplitHostPort(httpAddr)
			svc.RPC.HTTPPort, _ = strconv.Atoi(p)
		}
		conf.Services[string(name)] = svc
		hosts[name] = static.SingleLocalHost(hostPort(cfg.Host, port))
	}

	logger := serverLogger{l: cfg.Logger.With("component", "temporal-server"), level: logLevel}
	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("temporal: authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("temporal: claim mapper: %w", err)
	}

	dc := dynamicconfig.StaticClient{
		// Search attributes added at startup must be visible right away.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		// The default of 10 visibility requests/s is easily hit by the UI
		// plus a few workers listing workflows.
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key():        100,
		dynamicconfig.FrontendMaxNamespaceVisibilityBurstRatioPerInstance.Key(): 2,
		// The production default caches 128k mutable states; a dev box
		// needs far fewer.
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key(): 8192,
		// The history service reads its transfer tasks (every activity and workflow task
		// that is not dispatched eagerly) and its due timers at most 20 times a second per
		// shard by default, so each waits up to 50 ms before it is even read: with one
		// shard that wait was most of a timer's lateness and of a task push's dispatch
		// (docs/deployment.md, "The embedded engine's settings"). The rate is a ceiling: an idle
		// queue is not read more often.
		dynamicconfig.TransferProcessorMaxPollRPS.Key(): 200,
		dynamicconfig.TimerProcessorMaxPollRPS.Key():    200,
		// Each history queue keeps every task it has read, done or not, until its next
		// checkpoint (Temporal's 30 s), and walks all of them whenever it splits a range of
		// them. At a hundred and more workflows a second on one shard that is tens of
		// thousands of tasks; after a backlog had built up once, the walking took over a
		// quarter of the bench's CPU (docs/deployment.md, "The embedded engine's settings").
		dynamicconfig.TransferProcessorUpdateAckInterval.Key():   queueCheckpoint,
		dynamicconfig.TimerProcessorUpdateAckInterval.Key():      queueCheckpoint,
		dynamicconfig.VisibilityProcessorUpdateAckInterval.Key(): queueCheckpoint,
	}
	for k, v := range cfg.DynamicConfig {
		dc[dynamicconfig.MakeKey(k)] = v
	}

	srv, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dc),
	)
	if err != nil {
		return nil, fmt.Errorf("temporal: building server: %w", err)
	}
	return srv, nil
}

func (t *Temporal) startUI(cfg Config) {
	host := cfg.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // the UI server formats host:port itself
	}
	t.ui = uiserver.NewServer(uioptions.WithConfigProvider(&uiconfig.Config{
		Host:                host,
		Port:                cfg.UIPort,
		TemporalGRPCAddress: t.address,
		EnableUI:            true,
		DefaultNamespace:    cfg.Namespace,
		CORS:                uiconfig.CORS{CookieInsecure: true},
		HideLogs:            true,
		DisableNewsFetch:    true,
	}))
	t.uiURL = "http://" + hostPort(cfg.Host, cfg.UIPort)
	t.uiDone = make(chan struct{})
	ui, done := t.ui, t.uiDone
	go func() {
		defer close(done)
		// Start blocks until Stop; a bind failure exits the process inside
		// the UI server, which the port check above is there to prevent.
		if err := ui.Start(); err != nil {
			t.logger.Error("temporal ui: server failed", "error", err)
		}
	}()
}

func (t *Temporal) stopUI() {
	if t.ui == nil {
		return
	}
	t.ui.Stop()
	select {
	case <-t.uiDone:
	case <-time.After(5 * time.Second):
	}
	t.ui = nil
}

// setup waits for the frontend, then converges the namespace's retention and
// search attributes to cfg, then waits for the UI.
func (t *Temporal) setup(ctx context.Context, cfg Config) error {
	clientOpts := sdkclient.Options{
		HostPort:  t.address,
		Namespace: t.namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(minLevel{Handler: cfg.Logger.Handler(), level: slog.LevelWarn})),
	}
	c, err := t.dialFrontend(ctx, clientOpts)
	if err != nil {
		return err
	}
	defer c.Close()

	if err := t.ensureRetention(ctx, cfg.Retention); err != nil {
		return err
	}
	if err := t.ensureSearchAttributes(ctx, c, cfg.SearchAttributes); err != nil {
		return err
	}
	if t.uiURL != "" {
		if err := waitHTTP(ctx, t.uiURL+"/", uiReadyTimeout); err != nil {
			return fmt.Errorf("temporal ui: %w", err)
		}
	}
	return nil
}

func (t *Temporal) dialFrontend(ctx context.Context, opts sdkclient.Options) (sdkclient.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, frontendReadyTimeout)
	defer cancel()
	var lastErr error
	for {
		c, err := sdkclient.DialContext(ctx, opts)
		if err == nil {
			_, err = c.CheckHealth(ctx, &sdkclient.CheckHealthRequest{})
			if err == nil {
				// The namespace row was written before start; wait until the
				// frontend serves it.
				_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: t.namespace})
			}
			if err == nil {
				return c, nil
			}
			c.Close()
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("temporal: frontend at %s not ready: %w", t.address, errors.Join(ctx.Err(), lastErr))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (t *Temporal) ensureRetention(ctx context.Context, retention time.Duration) error {
	nc, err := sdkclient.NewNamespaceClient(sdkclient.Options{HostPort: t.address, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return fmt.Errorf("temporal: namespace client: %w", err)
	}
	defer nc.Close()
	desc, err := nc.Describe(ctx, t.namespace)
	if err != nil {
		return fmt.Errorf("temporal: describing namespace %q: %w", t.namespace, err)
	}
	if desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration() == retention {
		return nil
	}
	err = nc.Update(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace: t.namespace,
		Config: &namespacepb.NamespaceConfig{
			WorkflowExecutionRetentionTtl: durationpb.New(retention),
		},
	})
	if err != nil {
		return fmt.Errorf("temporal: setting retention of namespace %q to %s: %w", t.namespace, retention, err)
	}
	return nil
}

func (t *Temporal) ensureSearchAttributes(ctx context.Context, c sdkclient.Client, want map[string]enumspb.IndexedValueType) error {
	if len(want) == 0 {
		return nil
	}
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: t.namespace})
	if err != nil {
		return fmt.Errorf("temporal: listing search attributes: %w", err)
	}
	missing := make(map[string]enumspb.IndexedValueType)
	for name, typ := range want {
		have, ok := list.GetCustomAttributes()[name]
		if !ok {
			have, ok = list.GetSystemAttributes()[name]
		}
		switch {
		case !ok:
			missing[name] = typ
		case have != typ:
			return fmt.Errorf("temporal: search attribute %s already exists as %s, want %s", name, have, typ)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        t.namespace,
		SearchAttributes: missing,
	})
	if err != nil {
		return fmt.Errorf("temporal: adding search attributes: %w", err)
	}
	return t.waitSearchAttributes(ctx, c, missing)
}

// waitSearchAttributes returns once newly added attributes are usable. Each
// service caches namespaces (custom search attributes live on the namespace
// for SQL visibility) and reloads them periodically: poll the frontend with a
// query naming the attributes, then allow one more refresh for the others.
func (t *Temporal) waitSearchAttributes(ctx context.Context, c sdkclient.Client, added map[string]enumspb.IndexedValueType) error {
	ctx, cancel := context.WithTimeout(ctx, saReadyTimeout)
	defer cancel()
	terms := make([]string, 0, len(added))
	for name := range added {
		terms = append(terms, "`"+name+"` IS NOT NULL")
	}
	query := strings.Join(terms, " OR ")
	for {
		_, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: t.namespace,
			PageSize:  1,
			Query:     query,
		})
		if err == nil {
			break
		}
		var invalid *serviceerror.InvalidArgument
		if !errors.As(err, &invalid) && ctx.Err() == nil {
			return fmt.Errorf("temporal: checking search attributes: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("temporal: search attributes not usable after %s: %w", saReadyTimeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(namespaceRefresh):
		return nil
	}
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	var lastErr error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w", timeout, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
