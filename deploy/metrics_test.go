package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// promQL is one PromQL expression of the kit and where it is.
type promQL struct{ where, expr string }

// alertExprs are the expressions of deploy/prometheus/heartbeatd-alerts.yml.
func alertExprs(t *testing.T) []promQL {
	t.Helper()
	var file struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	b, err := os.ReadFile("prometheus/heartbeatd-alerts.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &file))
	var out []promQL
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			out = append(out, promQL{"alert " + r.Alert + r.Record, r.Expr})
		}
	}
	require.NotEmpty(t, out)
	return out
}

// dashboard is the part of deploy/grafana/heartbeatd.json the tests read.
type dashboard struct {
	Panels     []panel
	Templating struct {
		List []struct {
			Name, Type string
			Query      any // a string, or {"query": "..."}
			Datasource any
		}
	}
}

type panel struct {
	ID         int
	Type       string
	Title      string
	Datasource any
	Targets    []struct {
		Expr, RefID string
		Datasource  any
	}
	Panels []panel // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/heartbeatd.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

// allPanels flattens the rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// dashboardExprs are every panel target's expression and every query variable's query.
func dashboardExprs(t *testing.T) []promQL {
	t.Helper()
	d := readDashboard(t)
	var out []promQL
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out = append(out, promQL{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		out = append(out, promQL{"variable " + v.Name, q})
	}
	require.NotEmpty(t, out)
	return out
}

var (
	// metricRef finds the metric names an expression reads: heartbeatd's own and the Go client's
	// process_* and go_* (every name the kit uses has one of these prefixes; functions, labels and
	// keywords never do).
	metricRef = regexp.MustCompile(`\b(?:heartbeatd|process|go)_[a-zA-Z0-9_:]*`)
	// selectorRef is a metric name with its label matchers.
	selectorRef  = regexp.MustCompile(`\b((?:heartbeatd|process|go)_[a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcherLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	// groupingRef is the label list of by, without, on and ignoring.
	groupingRef = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
)

// targetLabels are the labels Prometheus adds to every scraped series (static configs, Kubernetes
// service discovery).
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// exposition is what /metrics shows: each family's type and label names.
type exposition map[string]struct {
	typ    dto.MetricType
	labels map[string]bool
}

func parseExposition(text string) (exposition, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	out := exposition{}
	for name, mf := range mfs {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		out[name] = struct {
			typ    dto.MetricType
			labels map[string]bool
		}{mf.GetType(), labels}
	}
	return out, nil
}

// series resolves a name an expression uses to the labels its series carry: a family, or a histogram's
// _bucket (with le), _sum or _count.
func (e exposition) series(name string) (map[string]bool, bool) {
	if f, ok := e[name]; ok {
		return f.labels, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if f, ok := e[base]; found && ok && (f.typ == dto.MetricType_HISTOGRAM || f.typ == dto.MetricType_SUMMARY) {
			labels := map[string]bool{}
			for l := range f.labels {
				labels[l] = true
			}
			if suffix == "_bucket" {
				labels["le"] = true
			}
			return labels, true
		}
	}
	return nil, false
}

// problems lists what in q the exposition does not have: metric names, labels in selectors, and labels
// in by/without/on/ignoring that none of q's series (nor Prometheus's target labels) carry.
func (e exposition) problems(q promQL) []string {
	var out []string
	known := map[string]bool{}
	for _, l := range targetLabels {
		known[l] = true
	}
	for _, name := range metricRef.FindAllString(q.expr, -1) {
		labels, ok := e.series(name)
		if !ok {
			out = append(out, fmt.Sprintf("%s: metric %s is not exposed", q.where, name))
			continue
		}
		for l := range labels {
			known[l] = true
		}
	}
	for _, m := range selectorRef.FindAllStringSubmatch(q.expr, -1) {
		labels, _ := e.series(m[1])
		for _, lm := range matcherLabel.FindAllStringSubmatch(m[2], -1) {
			if !labels[lm[1]] && !slices.Contains(targetLabels, lm[1]) {
				out = append(out, fmt.Sprintf("%s: %s has no label %s", q.where, m[1], lm[1]))
			}
		}
	}
	for _, m := range groupingRef.FindAllStringSubmatch(q.expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !known[l] {
				out = append(out, fmt.Sprintf("%s: no series of it has label %s", q.where, l))
			}
		}
	}
	return out
}

// TestKitUsesExposedMetrics runs heartbeatd on real redis-server, mosquitto and kfake with both ingest
// sources, feeds it signals until every series family exists, and checks every alert rule and dashboard
// expression against the names and labels its /metrics shows. It also sees the watchdog event reach
// Kafka and its timestamp metric move, end to end through the binary.
func TestKitUsesExposedMetrics(t *testing.T) {
	exprs := append(alertExprs(t), dashboardExprs(t)...)
	names := map[string]bool{}
	for _, q := range exprs {
		for _, n := range metricRef.FindAllString(q.expr, -1) {
			names[n] = true
		}
	}

	rdb, broker := testenv.StartRedis(t), testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"device-signals", "heartbeat.events", "heartbeat.deadletter"}})
	servers := testenv.HeartbeatdConfig{Redis: rdb.Addr, Slots: 8, MQTT: broker.Addr, ClientID: "deploy-test", Kafka: kafka.Addrs}
	// The notifier runs in the daemon, paging a webhook, so its families exist too.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(hook.Close)
	hb := testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: servers.YAML(`
types:
  default: {timeout: 1s, repeat_every: 0s}
  gateway: {timeout: 1s}
detection: {watchdog_every: 200ms, grace_after_outage: 100ms}
log: {level: debug, format: console}
notify:
  enabled: true
  receivers: [{name: tickets, webhook: {url: "` + hook.URL + `"}}]
  routes: [{receiver: tickets}]
`), Env: []string{"HEARTBEATD_INGEST_KAFKA_ENABLED=true", "HEARTBEATD_INGEST_KAFKA_BROKERS=" + strings.Join(kafka.Addrs, ","),
		"HEARTBEATD_CLUSTER_REPLICA_ID=deploy-test"}})
	ctx := context.Background()
	require.NoError(t, hb.AwaitReady(ctx, 30*time.Second), hb.LogTail())

	device := broker.Connect(t, mqtt.NewClientOptions().SetClientID("deploy-test-device"))
	for _, p := range []struct{ topic, payload string }{{"devices/d-mqtt/heartbeat", ""}, {"devices/gw-mqtt/heartbeat", `{"type":"gateway"}`},
		{"devices/bad/heartbeat", `{"ts":"yesterday"}`}} {
		tok := device.Publish(p.topic, 1, false, p.payload)
		require.True(t, tok.WaitTimeout(10*time.Second))
		require.NoError(t, tok.Error())
	}
	require.NoError(t, kafka.Client(t).ProduceSync(ctx, &kgo.Record{Topic: "device-signals", Key: []byte("d-kafka")}).FirstErr())

	// Every family exists once the devices were signalled, counted and (after their 1s) interrupted.
	var exposed exposition
	var missing []string
	assert.Eventually(t, func() bool {
		code, body, err := hb.Get("/metrics")
		if err != nil || code != 200 {
			return false
		}
		if exposed, err = parseExposition(body); err != nil {
			return false
		}
		missing = missing[:0]
		for n := range names {
			if _, ok := exposed.series(n); !ok {
				missing = append(missing, n)
			}
		}
		interrupted := strings.Contains(body, `heartbeatd_devices{state="interrupted",type="gateway"} 1`)
		watchdog := !strings.Contains(body, "heartbeatd_watchdog_last_published_timestamp_seconds 0\n")
		return len(missing) == 0 && interrupted && watchdog
	}, 30*time.Second, 100*time.Millisecond, "every family, a counted interruption and a published watchdog in /metrics")
	sort.Strings(missing)
	require.Empty(t, missing, "names the kit uses that heartbeatd does not expose")
	var problems []string
	for _, q := range exprs {
		problems = append(problems, exposed.problems(q)...)
	}
	require.Empty(t, problems)

	// The watchdog reached Kafka, keyed and named by the replica.
	var watchdog *event.Event
	kafka.ReadUntil(t, "heartbeat.events", 20*time.Second, func(recs []testenv.Record) bool {
		for _, r := range recs {
			e, err := event.Decode(r.Value)
			require.NoError(t, err)
			if e.Kind == event.Watchdog {
				require.Equal(t, "deploy-test", string(r.Key))
				watchdog = &e
				return true
			}
		}
		return false
	})
	require.NotNil(t, watchdog, "a watchdog event on heartbeat.events")
	require.Equal(t, "deploy-test", watchdog.DeviceID)
	require.Equal(t, event.WatchdogID("deploy-test", watchdog.At), watchdog.ID)

	// docs/metrics.md, the metrics reference, names every family the running binary exposes.
	page, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	var undocumented []string
	for name := range exposed {
		if strings.HasPrefix(name, "heartbeatd_") && !regexp.MustCompile("`"+regexp.QuoteMeta(name)+"[`{]").Match(page) {
			undocumented = append(undocumented, name)
		}
	}
	sort.Strings(undocumented)
	require.Empty(t, undocumented, "families docs/metrics.md does not name")
}

// The checks above can fail: a name, a selector label and a grouping label the exposition lacks are each
// reported, and the real ones pass.
func TestProblemsFindsWhatIsMissing(t *testing.T) {
	e, err := parseExposition(`# TYPE heartbeatd_devices gauge
heartbeatd_devices{state="online",type="default"} 3
# TYPE heartbeatd_detection_lateness_seconds histogram
heartbeatd_detection_lateness_seconds_bucket{le="+Inf"} 0
heartbeatd_detection_lateness_seconds_sum 0
heartbeatd_detection_lateness_seconds_count 0
`)
	require.NoError(t, err)
	require.Empty(t, e.problems(promQL{"ok", `sum by (state, type, job) (heartbeatd_devices{job=~"$job", state="online"})` +
		` + histogram_quantile(0.99, sum by (le) (rate(heartbeatd_detection_lateness_seconds_bucket[5m])))`}))
	require.Equal(t, []string{"x: metric heartbeatd_device is not exposed"}, e.problems(promQL{"x", `sum(heartbeatd_device)`}))
	require.Equal(t, []string{"x: heartbeatd_devices has no label status"}, e.problems(promQL{"x", `heartbeatd_devices{status="online"}`}))
	require.Equal(t, []string{"x: no series of it has label kind"}, e.problems(promQL{"x", `sum by (kind) (heartbeatd_devices)`}))
	require.Equal(t, []string{"x: metric heartbeatd_devices_bucket is not exposed"}, e.problems(promQL{"x", `heartbeatd_devices_bucket`}))
}
