package helmtest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// serviceMonitor and prometheusRule are the Prometheus Operator's resources (monitoring.coreos.com/v1),
// with the fields of their CRDs this chart may set; decoding strictly into them fails on any
// other field, as into the Kubernetes types.
type serviceMonitor struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Metadata   metadata           `json:"metadata"`
	Spec       serviceMonitorSpec `json:"spec"`
}

type metadata struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Endpoints []struct {
		Port     string `json:"port"`
		Path     string `json:"path"`
		Interval string `json:"interval"`
	} `json:"endpoints"`
}

type prometheusRule struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   metadata `json:"metadata"`
	Spec       struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert       string            `json:"alert,omitempty"`
		Record      string            `json:"record,omitempty"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

// rendered is one rendering of the chart, its objects decoded by kind and name.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        map[string]*policyv1.PodDisruptionBudget
	monitors    map[string]*serviceMonitor
	rules       map[string]*prometheusRule
}

func (r rendered) kinds() []string {
	var out []string
	add := func(kind string, n int) {
		for range n {
			out = append(out, kind)
		}
	}
	add("ConfigMap", len(r.configMaps))
	add("Deployment", len(r.deployments))
	add("Job", len(r.jobs))
	add("PodDisruptionBudget", len(r.pdbs))
	add("PrometheusRule", len(r.rules))
	add("Secret", len(r.secrets))
	add("Service", len(r.services))
	add("ServiceMonitor", len(r.monitors))
	return out
}

func renderChart(t *testing.T, vals map[string]any) (rendered, error) {
	t.Helper()
	ch, err := loader.Load("courier")
	require.NoError(t, err)
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "courier", Namespace: "apps", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	require.NoError(t, err)
	files, err := engine.Engine{Strict: true}.Render(ch, rv)
	if err != nil {
		return rendered{}, err
	}
	r := rendered{deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		monitors: map[string]*serviceMonitor{}, rules: map[string]*prometheusRule{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[name], -1) {
			raw, err := yaml.YAMLToJSON([]byte(doc))
			require.NoError(t, err, "%s is YAML:\n%s", name, doc)
			if string(raw) == "null" {
				continue // a template that rendered nothing, or only comments
			}
			var head struct{ APIVersion, Kind string }
			require.NoError(t, json.Unmarshal(raw, &head), name)
			strict := func(v any) {
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				require.NoError(t, dec.Decode(v), "%s decodes strictly into %s %s:\n%s", name, head.APIVersion, head.Kind, doc)
			}
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				var o appsv1.Deployment
				strict(&o)
				r.deployments[o.Name] = &o
			case "batch/v1 Job":
				var o batchv1.Job
				strict(&o)
				r.jobs[o.Name] = &o
			case "v1 Service":
				var o corev1.Service
				strict(&o)
				r.services[o.Name] = &o
			case "v1 ConfigMap":
				var o corev1.ConfigMap
				strict(&o)
				r.configMaps[o.Name] = &o
			case "v1 Secret":
				var o corev1.Secret
				strict(&o)
				r.secrets[o.Name] = &o
			case "policy/v1 PodDisruptionBudget":
				var o policyv1.PodDisruptionBudget
				strict(&o)
				r.pdbs[o.Name] = &o
			case "monitoring.coreos.com/v1 ServiceMonitor":
				var o serviceMonitor
				strict(&o)
				r.monitors[o.Metadata.Name] = &o
			case "monitoring.coreos.com/v1 PrometheusRule":
				var o prometheusRule
				strict(&o)
				r.rules[o.Metadata.Name] = &o
			default:
				t.Fatalf("%s renders an object of an unexpected kind %s %s", name, head.APIVersion, head.Kind)
			}
		}
	}
	return r, nil
}

// courierEnv is every environment variable courier's code names (string literals of the
// non-test Go files of cmd/courier), so the chart sets none that courier would not read.
func courierEnv(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "cmd", "courier", "*.go"))
	require.NoError(t, err)
	out := map[string]bool{}
	lit := regexp.MustCompile(`"((?:TEMPORAL|COURIER|NATS|DATABASE)_[A-Z0-9_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range lit.FindAllStringSubmatch(string(raw), -1) {
			out[m[1]] = true
		}
	}
	require.True(t, out["DATABASE_URL"] && out["TEMPORAL_API_KEY"] && out["COURIER_HTTP_ADDR"])
	return out
}

// checkWorkloads holds for every rendering: each courier container runs its role with the
// configuration and the secret, listens where its probes look (liveness /healthz, readiness
// /readyz, on the port of COURIER_HTTP_ADDR), has resource requests, and every variable the
// chart sets is one courier reads.
func checkWorkloads(t *testing.T, r rendered, secretName string) {
	t.Helper()
	known := courierEnv(t)
	cm := r.configMaps["courier"]
	require.NotNil(t, cm, "the ConfigMap")
	for k := range cm.Data {
		require.True(t, known[k], "the ConfigMap sets %s, which courier reads", k)
	}
	for _, s := range r.secrets {
		for k := range s.StringData {
			require.True(t, known[k], "the Secret sets %s, which courier reads", k)
		}
	}
	for role, port := range map[string]int32{"worker": 9090, "gateway": 8080} {
		d := r.deployments["courier-"+role]
		require.NotNil(t, d, role)
		spec := d.Spec.Template.Spec
		require.Len(t, spec.Containers, 1)
		c := spec.Containers[0]
		require.Equal(t, []string{role}, c.Args)
		require.Equal(t, d.Spec.Selector.MatchLabels["app.kubernetes.io/component"], d.Spec.Template.Labels["app.kubernetes.io/component"])
		require.Len(t, c.EnvFrom, 2)
		require.Equal(t, "courier", c.EnvFrom[0].ConfigMapRef.Name)
		require.Equal(t, secretName, c.EnvFrom[1].SecretRef.Name)
		require.Contains(t, c.Env, corev1.EnvVar{Name: "COURIER_HTTP_ADDR", Value: "0.0.0.0:" + itoa(port)})
		require.Len(t, c.Ports, 1)
		require.Equal(t, port, c.Ports[0].ContainerPort)
		require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			require.Equal(t, c.Ports[0].Name, p.HTTPGet.Port.String(), "%s probes its own port", role)
		}
		require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s requests CPU", role)
		require.False(t, c.Resources.Requests.Memory().IsZero(), "%s requests memory", role)
		require.NotNil(t, spec.SecurityContext.RunAsNonRoot)
		require.True(t, *spec.SecurityContext.RunAsNonRoot)
		require.Contains(t, d.Spec.Template.Annotations, "checksum/config")
	}
	gw := r.services["courier-gateway"]
	require.NotNil(t, gw)
	require.Equal(t, "gateway", gw.Spec.Selector["app.kubernetes.io/component"])
	require.Equal(t, "http", gw.Spec.Ports[0].TargetPort.String())
	require.Equal(t, corev1.ClusterIPNone, r.services["courier-worker-metrics"].Spec.ClusterIP)
	for name, job := range r.jobs {
		require.Equal(t, "pre-install,pre-upgrade", job.Annotations["helm.sh/hook"], name)
		require.Equal(t, []string{"migrate"}, job.Spec.Template.Spec.Containers[0].Args)
		require.Equal(t, corev1.RestartPolicyNever, job.Spec.Template.Spec.RestartPolicy)
	}
	// What the migrate hook reads exists before it: the ConfigMap and the chart's Secret are
	// hooks of a lower weight.
	require.Equal(t, "-10", cm.Annotations["helm.sh/hook-weight"])
	for _, s := range r.secrets {
		require.Equal(t, "-10", s.Annotations["helm.sh/hook-weight"])
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// The chart renders with its default values, and with two other sets (Temporal Cloud with an
// API key and the Prometheus Operator's resources; mTLS with Secrets of one's own), into
// objects that decode strictly into the Kubernetes API types; each set changes what it should.
func TestChartRenders(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		r, err := renderChart(t, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"ConfigMap", "Deployment", "Deployment", "Job", "PodDisruptionBudget", "PodDisruptionBudget", "Secret", "Service", "Service"}, r.kinds())
		checkWorkloads(t, r, "courier")
		cm := r.configMaps["courier"].Data
		require.Equal(t, "courier", cm["TEMPORAL_NAMESPACE"])
		require.Equal(t, "http://courier-gateway.apps.svc:8080", cm["COURIER_PUBLIC_URL"], "task workers reach the gateway's Service")
		require.NotContains(t, cm, "TEMPORAL_TLS")
		require.NotContains(t, r.secrets["courier"].StringData, "TEMPORAL_API_KEY")
		require.Equal(t, int32(2), *r.deployments["courier-worker"].Spec.Replicas)
		require.Equal(t, "courier:0.1.0", r.deployments["courier-worker"].Spec.Template.Spec.Containers[0].Image)
		require.Equal(t, 1, r.pdbs["courier-worker"].Spec.MaxUnavailable.IntValue())
	})

	t.Run("temporal-cloud", func(t *testing.T) {
		r, err := renderChart(t, map[string]any{
			"image":       map[string]any{"repository": "registry.example.com/courier", "tag": "1.2.3"},
			"temporal":    map[string]any{"address": "us-east-1.aws.api.temporal.io:7233", "namespace": "payments.a1b2c", "apiKey": "tmprl-key"},
			"databaseURL": "postgres://courier:pw@db.example.com:5432/courier?sslmode=require",
			"config":      map[string]any{"COURIER_OUTBOX_POLL": "500ms", "COURIER_TASK_PUSH_SLOTS": 400},
			"gateway":     map[string]any{"service": map[string]any{"type": "LoadBalancer"}},
			"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
				"prometheusRule": map[string]any{"enabled": true}},
		})
		require.NoError(t, err)
		require.Equal(t, []string{"ConfigMap", "Deployment", "Deployment", "Job", "PodDisruptionBudget", "PodDisruptionBudget", "PrometheusRule", "Secret", "Service", "Service", "ServiceMonitor"}, r.kinds())
		checkWorkloads(t, r, "courier")
		require.Equal(t, "tmprl-key", r.secrets["courier"].StringData["TEMPORAL_API_KEY"], "the key is in the Secret")
		cm := r.configMaps["courier"].Data
		require.NotContains(t, strings.Join(mapValues(cm), " "), "tmprl-key", "never in the ConfigMap")
		require.Equal(t, "us-east-1.aws.api.temporal.io:7233", cm["TEMPORAL_ADDRESS"])
		require.Equal(t, "400", cm["COURIER_TASK_PUSH_SLOTS"])
		require.Equal(t, "registry.example.com/courier:1.2.3", r.jobs["courier-migrate"].Spec.Template.Spec.Containers[0].Image)
		require.Equal(t, corev1.ServiceTypeLoadBalancer, r.services["courier-gateway"].Spec.Type)

		sm := r.monitors["courier"]
		require.Equal(t, "kube-prometheus", sm.Metadata.Labels["release"])
		require.Equal(t, "true", sm.Spec.Selector.MatchLabels["courier.dev/metrics"])
		ports := map[string]bool{}
		for _, e := range sm.Spec.Endpoints {
			ports[e.Port] = true
		}
		for _, svc := range r.services {
			require.Equal(t, "true", svc.Labels["courier.dev/metrics"], "%s is scraped", svc.Name)
			require.True(t, ports[svc.Spec.Ports[0].Name], "the ServiceMonitor scrapes %s's port", svc.Name)
		}

		// The PrometheusRule carries deploy/prometheus/courier-rules.yml's groups unchanged.
		var want struct {
			Groups []ruleGroup `json:"groups"`
		}
		raw, err := os.ReadFile(filepath.Join("..", "prometheus", "courier-rules.yml"))
		require.NoError(t, err)
		require.NoError(t, yaml.UnmarshalStrict(raw, &want))
		require.Equal(t, want.Groups, r.rules["courier"].Spec.Groups)
		alerts := 0
		for _, g := range want.Groups {
			alerts += len(g.Rules)
		}
		require.GreaterOrEqual(t, alerts, 13)
	})

	t.Run("mtls-own-secrets", func(t *testing.T) {
		r, err := renderChart(t, map[string]any{
			"secrets":   map[string]any{"existingSecret": "courier-env"},
			"temporal":  map[string]any{"address": "temporal-frontend.temporal:7233", "tls": map[string]any{"existingSecret": "temporal-client", "serverName": "temporal.internal"}},
			"publicURL": "https://courier.example.com",
			"migrate":   map[string]any{"enabled": false},
			"worker":    map[string]any{"replicas": 4, "pdb": map[string]any{"enabled": false}},
		})
		require.NoError(t, err)
		require.Equal(t, []string{"ConfigMap", "Deployment", "Deployment", "PodDisruptionBudget", "Service", "Service"}, r.kinds())
		checkWorkloads(t, r, "courier-env")
		cm := r.configMaps["courier"].Data
		require.Equal(t, "true", cm["TEMPORAL_TLS"])
		require.Equal(t, "temporal.internal", cm["TEMPORAL_TLS_SERVER_NAME"])
		require.Equal(t, "https://courier.example.com", cm["COURIER_PUBLIC_URL"])
		for _, role := range []string{"worker", "gateway"} {
			spec := r.deployments["courier-"+role].Spec.Template.Spec
			require.Len(t, spec.Volumes, 1)
			require.Equal(t, "temporal-client", spec.Volumes[0].Secret.SecretName)
			mount := spec.Containers[0].VolumeMounts[0]
			require.Equal(t, filepath.Dir(cm["TEMPORAL_TLS_CERT"]), mount.MountPath, "%s mounts the certificate where TEMPORAL_TLS_CERT points", role)
			require.Equal(t, filepath.Dir(cm["TEMPORAL_TLS_KEY"]), mount.MountPath)
		}
		require.Equal(t, int32(4), *r.deployments["courier-worker"].Spec.Replicas)
		require.NotContains(t, r.pdbs, "courier-worker")
	})

	t.Run("no database", func(t *testing.T) {
		_, err := renderChart(t, map[string]any{"databaseURL": ""})
		require.ErrorContains(t, err, "set databaseURL")
	})
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// The chart's copy of the alert rules is deploy/prometheus/courier-rules.yml (Helm reads only
// files inside the chart).
func TestChartRulesAreTheRules(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("..", "prometheus", "courier-rules.yml"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("courier", "files", "courier-rules.yml"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "copy deploy/prometheus/courier-rules.yml to deploy/helm/courier/files/")
}
