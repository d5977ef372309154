package cluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/worker"
)

// DynamicConfig is the Temporal dynamic config every service of the topology runs with
// (temporal-dynamicconfig.yaml; docker-compose.temporal.yml mounts the same file).
//
//go:embed temporal-dynamicconfig.yaml
var DynamicConfig []byte

// DynamicConfigFile is DynamicConfig's path in the repository, for docker-compose.temporal.yml.
const DynamicConfigFile = "internal/cluster/temporal-dynamicconfig.yaml"

// TemporalServices are Temporal's services, one process each, in the order they start: history
// first, because the first process to start writes the cluster's metadata and several starting
// at once on an empty database race to write it.
var TemporalServices = []string{"history", "matching", "frontend", "worker"}

// TemporalSettings are the environment every Temporal service runs with, whoever starts it
// (make cluster, docker-compose.temporal.yml): the variables of the configuration template
// built into the server binary (the temporalio/server image runs the same template), except
// addresses and ports.
var TemporalSettings = map[string]string{
	"DB":                 "postgres12",
	"DBNAME":             "temporal",
	"VISIBILITY_DBNAME":  "temporal_visibility",
	"NUM_HISTORY_SHARDS": "8",
	"LOG_LEVEL":          "warn",
}

// Schema names of the SQL schemas the schema tool applies, built into the tool.
const (
	schemaTemporal   = "postgresql/v12/temporal"
	schemaVisibility = "postgresql/v12/visibility"
)

// temporalPorts are one service's ports.
type temporalPorts struct {
	GRPC, Membership, HTTP, PProf, Metrics int
}

// temporalEnv is the environment of one Temporal service process.
func temporalEnv(service string, db *Postgres, shards int, ports map[string]temporalPorts, dynamicConfigPath, host string) []string {
	env := map[string]string{}
	for k, v := range TemporalSettings {
		env[k] = v
	}
	env["NUM_HISTORY_SHARDS"] = strconv.Itoa(shards)
	env["POSTGRES_SEEDS"] = db.Host
	env["DB_PORT"] = strconv.Itoa(db.Port)
	env["VISIBILITY_DB_PORT"] = strconv.Itoa(db.Port) // the template's visibility store does not read DB_PORT
	env["POSTGRES_USER"] = "postgres"
	env["POSTGRES_PWD"] = ""
	env["BIND_ON_IP"] = host
	env["TEMPORAL_BROADCAST_ADDRESS"] = host
	env["DYNAMIC_CONFIG_FILE_PATH"] = dynamicConfigPath
	env["TEMPORAL_SERVICES"] = service
	// Every process renders the whole template, so each learns every service's ports
	// (membership finds the others through the database; the frontend's address is the
	// cluster's).
	for svc, p := range ports {
		up := strings.ToUpper(svc)
		env[up+"_GRPC_PORT"] = strconv.Itoa(p.GRPC)
		env[up+"_MEMBERSHIP_PORT"] = strconv.Itoa(p.Membership)
	}
	env["FRONTEND_HTTP_PORT"] = strconv.Itoa(ports["frontend"].HTTP)
	own := ports[service]
	env["PPROF_PORT"] = strconv.Itoa(own.PProf)
	env["PROMETHEUS_ENDPOINT"] = net.JoinHostPort(host, strconv.Itoa(own.Metrics))
	out := make([]string, 0, len(env)+1)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return append(out, "PATH="+os.Getenv("PATH"))
}

// setupTemporalSchema creates Temporal's two databases and applies their schemas with the
// schema tool, as the temporalio/admin-tools image's setup does; on a database that has them
// it applies only what is missing.
func setupTemporalSchema(ctx context.Context, sqlTool string, db *Postgres, logPath string) error {
	for _, s := range []struct{ db, schema string }{
		{TemporalSettings["DBNAME"], schemaTemporal},
		{TemporalSettings["VISIBILITY_DBNAME"], schemaVisibility},
	} {
		created, err := db.CreateDatabase(ctx, s.db)
		if err != nil {
			return fmt.Errorf("create database %s: %w", s.db, err)
		}
		steps := [][]string{{"update-schema", "--schema-name", s.schema}}
		if created {
			steps = append([][]string{{"setup-schema", "-v", "0.0"}}, steps...)
		}
		for _, step := range steps {
			args := append([]string{"--plugin", TemporalSettings["DB"], "--ep", db.Host, "-p", strconv.Itoa(db.Port),
				"-u", "postgres", "--db", s.db}, step...)
			if err := runLogged(ctx, logPath, sqlTool, args...); err != nil {
				return fmt.Errorf("temporal-sql-tool %s on %s: %w (see %s)", step[0], s.db, err, logPath)
			}
		}
	}
	return nil
}

// runLogged runs a command to completion with its output appended to logPath.
func runLogged(ctx context.Context, logPath, name string, args ...string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "\n$ %s %s\n", filepath.Base(name), strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Run()
}

// waitListening waits until addr accepts TCP connections, failing at once if p exits.
func waitListening(ctx context.Context, p *Proc, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited while starting (see %s): %v", p.Name, p.LogPath(), p.ExitErr())
		case <-ctx.Done():
			return fmt.Errorf("%s does not listen on %s after %s (see %s)", p.Name, addr, timeout, p.LogPath())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// quietSDKLogger drops the SDK's own logging (retries while the cluster comes up).
func quietSDKLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

// SearchAttributes are courier's custom search attributes as Temporal types.
func SearchAttributes() map[string]enumspb.IndexedValueType {
	out := map[string]enumspb.IndexedValueType{}
	for name, typ := range courier.SearchAttributes {
		out[name] = worker.IndexedValueType(typ)
	}
	return out
}

// setupNamespace registers the namespace with the retention (or sets the retention of one
// that exists), registers courier's search attributes, and returns once the frontend accepts
// queries that name them.
func setupNamespace(ctx context.Context, frontend *Proc, addr, namespace string, retention time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// A frontend that exits (a bad configuration) ends the wait at once.
	go func() {
		select {
		case <-frontend.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	var (
		c   sdkclient.Client
		err error
	)
	for {
		c, err = sdkclient.DialContext(ctx, sdkclient.Options{HostPort: addr, Namespace: namespace, Logger: quietSDKLogger()})
		if err == nil {
			if _, err = c.CheckHealth(ctx, &sdkclient.CheckHealthRequest{}); err == nil {
				break
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("temporal frontend at %s (see %s): %w", addr, frontend.LogPath(), errors.Join(ctx.Err(), err))
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer c.Close()
	ws := c.WorkflowService()
	_, err = ws.RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        namespace,
		Description:                      "courier",
		WorkflowExecutionRetentionPeriod: durationpb.New(retention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	switch {
	case errors.As(err, &exists):
		if _, err := ws.UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{Namespace: namespace,
			Config: &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(retention)}}); err != nil {
			return fmt.Errorf("set the retention of namespace %s: %w", namespace, err)
		}
	case err != nil:
		return fmt.Errorf("register namespace %s: %w", namespace, err)
	}
	// Each service loads new namespaces on its next refresh: wait until the frontend knows it.
	for {
		_, err := ws.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s: %w", namespace, errors.Join(ctx.Err(), err))
		case <-time.After(200 * time.Millisecond):
		}
	}
	want := SearchAttributes()
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range want {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) > 0 {
		if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: namespace, SearchAttributes: missing}); err != nil {
			return fmt.Errorf("add search attributes: %w", err)
		}
	}
	terms := make([]string, 0, len(want))
	for name := range want {
		terms = append(terms, "`"+name+"` IS NOT NULL")
	}
	sort.Strings(terms)
	query := strings.Join(terms, " OR ")
	for {
		_, err := ws.ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, PageSize: 1, Query: query})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes not usable: %w", errors.Join(ctx.Err(), err))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
