package deploy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// helmVersion is the helm the chart is checked with, built from the Go module proxy.
const helmVersion = "v3.22.0"

const chart = "helm/heartbeatd"

// helmBinary returns helm helmVersion, built once per machine with `go install` into
// $(go env GOCACHE)/heartbeatd-tools/bin and reused from there (the build takes minutes on a small
// machine; the cache survives between runs). A build that fails skips the test, or fails it with CI=true.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmBuild.once.Do(func() { helmBuild.path, helmBuild.err = buildHelm(t) })
	if helmBuild.err != nil {
		testenv.Need(t, "helm "+helmVersion+" (go install helm.sh/helm/v3/cmd/helm@"+helmVersion+")", helmBuild.err)
	}
	return helmBuild.path
}

var helmBuild struct {
	once sync.Once
	path string
	err  error
}

func buildHelm(t *testing.T) (string, error) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	out, err := exec.Command(goBin, "env", "GOCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "heartbeatd-tools", "bin")
	bin := filepath.Join(dir, "helm")
	// The module version the binary was built from (helm's own version command says only "v3.22").
	if info, err := exec.Command(goBin, "version", "-m", bin).Output(); err == nil &&
		strings.Contains(string(info), "\tmod\thelm.sh/helm/v3\t"+helmVersion+"\t") {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goBin, "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
	cmd.Dir = os.TempDir() // outside this module: go install pkg@version builds with helm's own go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	t.Logf("built helm %s into %s in %s", helmVersion, dir, time.Since(start).Round(time.Second))
	return bin, nil
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	if err != nil {
		return out.String() + errOut.String(), err
	}
	return out.String(), nil
}

// object is one rendered Kubernetes object.
type object map[string]any

// at walks the object by keys and list indexes ("spec", "template", 0 ...); nil when absent.
func (o object) at(path ...any) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

// render runs helm template and returns the objects by kind.
func render(t *testing.T, args ...string) map[string]object {
	t.Helper()
	out, err := helm(t, append([]string{"template", "hb", chart, "--namespace", "fleet"}, args...)...)
	require.NoError(t, err, out)
	objs := map[string]object{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var m map[string]any // not object: yaml.v3 would give the nested maps that type too
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if m == nil {
			continue
		}
		o := object(m)
		kind, _ := o["kind"].(string)
		require.NotContains(t, objs, kind, "one %s", kind)
		objs[kind] = o
	}
	return objs
}

// The chart passes helm lint --strict, renders what an operator expects (replicas with probes on
// /healthz and /readyz, a non-root read-only container, the token and passwords from a Secret as files,
// a ServiceMonitor and a PodDisruptionBudget on the pods' labels), and its config with the StatefulSet's
// environment is one `heartbeatd check-config` accepts.
func TestHelmChart(t *testing.T) {
	for _, set := range [][]string{nil, {"--set", "serviceMonitor.enabled=true,secrets.redisPassword=r,secrets.mqttPassword=m"}} {
		out, err := helm(t, append([]string{"lint", "--strict", chart}, set...)...)
		require.NoError(t, err, out)
	}
	objs := render(t, "--set", "serviceMonitor.enabled=true,secrets.redisPassword=redis-pw,secrets.mqttPassword=mqtt-pw")
	for _, kind := range []string{"ConfigMap", "Secret", "StatefulSet", "Service", "ServiceMonitor", "PodDisruptionBudget"} {
		require.Contains(t, objs, kind)
	}
	dep := objs["StatefulSet"]
	require.Equal(t, 2, dep.at("spec", "replicas"))
	podLabels := dep.at("spec", "template", "metadata", "labels").(map[string]any)
	for _, sel := range []any{dep.at("spec", "selector", "matchLabels"), objs["Service"].at("spec", "selector"),
		objs["ServiceMonitor"].at("spec", "selector", "matchLabels"), objs["PodDisruptionBudget"].at("spec", "selector", "matchLabels")} {
		for k, v := range sel.(map[string]any) {
			require.Equal(t, v, podLabels[k], "selector %s", k)
		}
	}
	require.Equal(t, "http", objs["ServiceMonitor"].at("spec", "endpoints", 0, "port"))
	require.Equal(t, "/metrics", objs["ServiceMonitor"].at("spec", "endpoints", 0, "path"))
	require.Equal(t, "http", objs["Service"].at("spec", "ports", 0, "name"))
	require.Equal(t, 1, objs["PodDisruptionBudget"].at("spec", "maxUnavailable"))

	pod := object(dep.at("spec", "template", "spec").(map[string]any))
	require.Equal(t, true, pod.at("securityContext", "runAsNonRoot"))
	require.Equal(t, false, pod.at("automountServiceAccountToken"))
	c := object(pod.at("containers", 0).(map[string]any))
	require.Equal(t, "/healthz", c.at("livenessProbe", "httpGet", "path"))
	require.Equal(t, "/readyz", c.at("readinessProbe", "httpGet", "path"))
	require.Equal(t, true, c.at("securityContext", "readOnlyRootFilesystem"))
	require.Equal(t, false, c.at("securityContext", "allowPrivilegeEscalation"))
	require.Equal(t, []any{"ALL"}, c.at("securityContext", "capabilities", "drop"))

	// The container's environment, with the pod's name for the field reference.
	env := map[string]string{}
	for _, e := range c.at("env").([]any) {
		e := object(e.(map[string]any))
		v, _ := e.at("value").(string)
		if e.at("valueFrom", "fieldRef", "fieldPath") == "metadata.name" {
			v = "hb-heartbeatd-0"
		}
		env[e.at("name").(string)] = v
	}
	secret := map[string]string{}
	for k, v := range objs["Secret"].at("data").(map[string]any) {
		b, err := base64.StdEncoding.DecodeString(v.(string))
		require.NoError(t, err)
		secret[k] = string(b)
	}
	require.Len(t, secret["api-token"], 48, "a token is generated when none is given")
	require.Equal(t, "redis-pw", secret["redis-password"])
	require.Equal(t, "/etc/heartbeatd/secrets/api-token", env["HEARTBEATD_HTTP_TOKEN_FILE"])
	require.Equal(t, "/etc/heartbeatd/secrets/redis-password", env["HEARTBEATD_REDIS_PASSWORD_FILE"])
	require.Equal(t, "/etc/heartbeatd/secrets/mqtt-password", env["HEARTBEATD_INGEST_MQTT_PASSWORD_FILE"])
	require.NotContains(t, env, "HEARTBEATD_INGEST_KAFKA_SASL_PASSWORD_FILE", "only the secrets given")
	require.NotContains(t, objs["ConfigMap"].at("data", "heartbeatd.yaml"), "redis-pw", "no secret in the ConfigMap")

	// Lay the mounts out under a directory and run check-config as the pod would (HEARTBEATD_CONFIG).
	root := t.TempDir()
	mounts := map[string]map[string]string{}
	for _, m := range c.at("volumeMounts").([]any) {
		m := object(m.(map[string]any))
		files := secret
		if m.at("name") == "config" {
			files = map[string]string{"heartbeatd.yaml": objs["ConfigMap"].at("data", "heartbeatd.yaml").(string)}
		}
		mounts[m.at("mountPath").(string)] = files
	}
	for dir, files := range mounts {
		require.NoError(t, os.MkdirAll(filepath.Join(root, dir), 0o700))
		for name, content := range files {
			require.NoError(t, os.WriteFile(filepath.Join(root, dir, name), []byte(content), 0o600))
		}
	}
	var vars []string
	for k, v := range env {
		if strings.HasPrefix(v, "/etc/heartbeatd/") {
			v = filepath.Join(root, v)
		}
		vars = append(vars, k+"="+v)
	}
	cmd := exec.Command(testenv.HeartbeatdBinary(t), "check-config")
	cmd.Env = append(os.Environ(), vars...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "heartbeatd.yaml: ok")
	require.NotContains(t, string(out), secret["api-token"])

	// An existing Secret must hold the token: without one heartbeatd would refuse to start.
	msg, err := helm(t, "template", "hb", chart, "--set", "secrets.existingSecret=mine,secrets.existingSecretKeys={redis-password}")
	require.Error(t, err)
	require.Contains(t, msg, "secrets.existingSecretKeys must hold api-token")
	objs = render(t, "--set", "secrets.existingSecret=mine,secrets.existingSecretKeys={api-token,kafka-events-password}")
	require.NotContains(t, objs, "Secret", "the operator's own Secret is used")
	require.Equal(t, "mine", objs["StatefulSet"].at("spec", "template", "spec", "volumes", 1, "secret", "secretName"))
}

// Each replica keeps its MQTT client id across rollouts: the chart runs a StatefulSet, whose pods are
// named <name>-<ordinal> whatever the revision, the replica id (and so the client id) is the pod's name,
// and the config sets no client id of its own. A rollout replaces one pod at a time, the old one first.
func TestHelmStableMQTTClientIDs(t *testing.T) {
	ids := map[string]bool{}
	var name string
	for _, tag := range []string{"1.0.0", "1.0.1"} { // two revisions: a rollout
		objs := render(t, "--set", "image.tag="+tag+",replicaCount=3")
		require.NotContains(t, objs, "Deployment", "a Deployment's pod names change at every rollout")
		sts := objs["StatefulSet"]
		require.Equal(t, objs["Service"].at("metadata", "name"), sts.at("spec", "serviceName"), "governed by the chart's Service")
		require.Equal(t, "RollingUpdate", sts.at("spec", "updateStrategy", "type"))
		require.Nil(t, sts.at("spec", "updateStrategy", "rollingUpdate", "maxUnavailable"), "one pod at a time")
		if name == "" {
			name = sts.at("metadata", "name").(string)
		}
		require.Equal(t, name, sts.at("metadata", "name"), "the pods' names come from it")

		var replicaID any
		for _, e := range sts.at("spec", "template", "spec", "containers", 0, "env").([]any) {
			if e := object(e.(map[string]any)); e.at("name") == "HEARTBEATD_CLUSTER_REPLICA_ID" {
				replicaID = e.at("valueFrom", "fieldRef", "fieldPath")
			}
		}
		require.Equal(t, "metadata.name", replicaID, "the replica id is the pod's name")

		cfgText := objs["ConfigMap"].at("data", "heartbeatd.yaml").(string)
		for ordinal := range 3 {
			pod := fmt.Sprintf("%s-%d", name, ordinal)
			cfg, err := config.Parse([]byte(cfgText), func(k string) (string, bool) {
				if k == "HEARTBEATD_CLUSTER_REPLICA_ID" {
					return pod, true
				}
				return "", false
			})
			require.NoError(t, err)
			ids[cfg.MQTTClientID()] = true
		}
	}
	require.Equal(t, map[string]bool{"heartbeatd-hb-heartbeatd-0": true, "heartbeatd-hb-heartbeatd-1": true,
		"heartbeatd-hb-heartbeatd-2": true}, ids, "three replicas, the same three client ids in both revisions")
}
