package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// promtool runs promtool with args in dir and returns its output; a missing promtool skips the test
// (fails it with CI=true).
func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	return runTool(t, "promtool", "Debian package prometheus", dir, args...)
}

// The alert rules pass promtool's checks and its unit tests, and prometheus.yml (the compose stack's)
// is a valid config that loads them.
func TestAlertRules(t *testing.T) {
	for _, args := range [][]string{
		{"check", "rules", "heartbeatd-alerts.yml"},
		{"test", "rules", "heartbeatd-alerts.test.yml"},
		{"check", "config", "prometheus.yml"},
	} {
		out, err := promtool(t, "prometheus", args...)
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
	// Every alert has a severity, a summary and a description, and a unit test covers the ones that page.
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	b, err := os.ReadFile("prometheus/heartbeatd-alerts.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &rules))
	tests, err := os.ReadFile("prometheus/heartbeatd-alerts.test.yml")
	require.NoError(t, err)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.NotEmpty(t, r.Annotations["description"], r.Alert)
			if r.Labels["severity"] == "critical" {
				require.Contains(t, string(tests), "alertname: "+r.Alert+"\n", "a critical alert without a unit test")
			}
		}
	}
}

// grafanaVar is a dashboard variable in an expression: $name or ${name}.
var grafanaVar = regexp.MustCompile(`\$\{?(__rate_interval|__interval|__range|[a-zA-Z_][a-zA-Z0-9_]*)\}?`)

// Every dashboard expression is valid PromQL: promtool parses each, its variables filled in, as a
// recording rule. The panels read the data source variable, so the dashboard imports into any Grafana.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	ids := map[int]bool{}
	for _, p := range d.allPanels() {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		want := map[string]any{"type": "prometheus", "uid": "${datasource}"}
		require.Equal(t, want, p.Datasource, "panel %q", p.Title)
		for _, tg := range p.Targets {
			require.Equal(t, want, tg.Datasource, "panel %q target %s", p.Title, tg.RefID)
		}
	}

	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, q := range dashboardExprs(t) {
		if strings.HasPrefix(q.expr, "label_values(") {
			continue // a Grafana function, not PromQL; TestKitUsesExposedMetrics checks its metric
		}
		expr := grafanaVar.ReplaceAllStringFunc(q.expr, func(v string) string {
			switch strings.Trim(v, "${}") {
			case "__rate_interval", "__interval":
				return "1m"
			case "__range":
				return "1h"
			}
			return ".*"
		})
		n++
		fmt.Fprintf(&rules, "      - record: dashboard:expr_%d\n        # %s\n        expr: %q\n", n, q.where, expr)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "dashboard-rules.yml")
	require.NoError(t, os.WriteFile(path, []byte(rules.String()), 0o600))
	out, err := promtool(t, dir, "check", "rules", path)
	require.NoError(t, err, "%s\n%s", out, rules.String())
	require.Contains(t, out, fmt.Sprintf("SUCCESS: %d rules found", n))
}
