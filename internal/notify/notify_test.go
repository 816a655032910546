package notify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func TestPagerDutyAndSlackHearOfEachIncidentOnceWhenItOpensAndOnceWhenItCloses(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: oncall, pagerduty: {routing_key: "${PD_KEY}", url: "{{url}}/v2/enqueue"}}
    - {name: noc, slack: {webhook_url: "${SLACK_URL}"}}
  routes:
    - {match: ['device_type="gateway"', 'site=~"ber.*"'], receiver: oncall, continue: true}
    - {receiver: noc}
`, map[string]string{"PD_KEY": "0123456789abcdef0123456789abcdef", "SLACK_URL": f.srv.URL + "/services/T0/B0/x"})
	reg := prometheus.NewRegistry()
	f.run(f.newNotifier(n, reg))

	f.setLabels("gw-1", map[string]string{"site": "ber-1"})
	f.setLabels("gw-2", map[string]string{"site": "muc-1"})
	open1, close1 := f.incident("gw-1", "gateway", 1)
	open2, close2 := f.incident("gw-2", "gateway", 1)
	alarm := event.New(event.Alarm, "gw-1", "gateway", open1.Deadline, open1.LastSeen, open1.At.Add(time.Minute), 1)
	// open1 twice: Kafka's at-least-once delivery, or heartbeatd publishing again after a crash.
	f.publish(open1, open1, alarm, open2, close1, close2)

	require.Eventually(t, func() bool { return len(f.srv.pagerDuty()) >= 2 && len(f.srv.slackTexts()) >= 4 }, waitFor, 20*time.Millisecond)
	pd := f.srv.pagerDuty()
	require.Len(t, pd, 2, "gw-1 opened and closed, once each; no repeat, gw-2 is not in ber")
	assert.Equal(t, "trigger", pd[0].EventAction)
	assert.Equal(t, "critical", pd[0].Payload.Severity)
	assert.Equal(t, "gw-1", pd[0].Payload.Source)
	assert.Contains(t, pd[0].Payload.Summary, "gw-1 (gateway) interrupted")
	assert.Equal(t, "resolve", pd[1].EventAction)
	assert.Equal(t, open1.ID, pd[0].DedupKey, "the incident's id")
	assert.Equal(t, pd[0].DedupKey, pd[1].DedupKey, "the resolve names the incident the trigger opened")

	texts := f.srv.slackTexts()
	require.Len(t, texts, 4, "%q", texts)
	all := strings.Join(texts, "\n")
	assert.Contains(t, all, "gw-1 (gateway) interrupted, silent since")
	assert.Contains(t, all, "gw-2 (gateway) recovered after 1m30s")
	// gw-1's events share a partition: its close came after the second open1 was handled.
	assert.Equal(t, 1.0, counterValue(t, reg, "oncall", resultDuplicate), "the second open1 was no news")
	assert.Equal(t, 1.0, counterValue(t, reg, "noc", resultDuplicate))
}

func TestARefusalOtherThan429IsDeadLetteredWithTheAnswerAndTheRestGoesOn(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - name: tickets
      webhook:
        url: "{{url}}/hook"
        method: PUT
        headers: {X-Api-Key: "${TICKETS_KEY}"}
        body: '{"device": "{{ .DeviceID }}", "kind": "{{ .Kind }}", "site": "{{ index .Labels "site" }}"}'
      rate: 100/s
      burst: 100
  routes:
    - {receiver: tickets}
`, map[string]string{"TICKETS_KEY": "k-123"})
	nt := f.newNotifier(n, nil)
	f.run(nt)
	f.setLabels("dev-1", map[string]string{"site": "ber-1"})

	f.srv.fail(422, `{"error": "ticket queue closed"}`)
	bad, _ := f.incident("dev-1", "meter", 1)
	f.publish(bad)
	var dead []DeadLetter
	require.Eventually(t, func() bool {
		var err error
		dead, err = nt.DeadLetters(t.Context(), "tickets", 10)
		require.NoError(t, err)
		return len(dead) == 1
	}, waitFor, 20*time.Millisecond)
	assert.Equal(t, 422, dead[0].Status)
	assert.Equal(t, `{"error": "ticket queue closed"}`, dead[0].Answer)
	assert.Equal(t, bad.ID, dead[0].EventID)

	// 429 is "later", not "never": kept and sent once the receiver takes it.
	f.srv.fail(429, "slow down")
	good, _ := f.incident("dev-2", "meter", 2)
	f.publish(good)
	require.Eventually(t, func() bool {
		waiting, err := nt.store.Waiting(t.Context(), "tickets")
		return err == nil && waiting == 1
	}, waitFor, 20*time.Millisecond)
	f.srv.fail(0, "")
	require.Eventually(t, func() bool { return len(f.srv.hookRequests()) == 1 }, waitFor, 20*time.Millisecond)
	h := f.srv.hookRequests()[0]
	assert.Equal(t, "PUT", h.Method)
	assert.Equal(t, "k-123", h.Header.Get("X-Api-Key"))
	assert.JSONEq(t, `{"device": "dev-2", "kind": "interrupted", "site": ""}`, h.Body)
	dead, err := nt.DeadLetters(t.Context(), "tickets", 10)
	require.NoError(t, err)
	assert.Len(t, dead, 1, "the 429 was not dead-lettered")
}

func TestAReceiverDownThenBackLosesNothingAndKeepsEachDevicesOrder(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: noc, slack: {webhook_url: "${SLACK_URL}"}, rate: 1000/s, burst: 1000}
  routes:
    - {receiver: noc}
`, map[string]string{"SLACK_URL": f.srv.URL + "/services/T0/B0/x"})
	reg := prometheus.NewRegistry()
	nt := f.newNotifier(n, reg)
	f.run(nt)

	f.srv.down.Store(true)
	devs := devices("dev", 20)
	var opened []string
	for _, d := range devs {
		open, closed := f.incident(d, "meter", 1)
		f.publish(open, closed)
		opened = append(opened, d)
	}
	require.Eventually(t, func() bool { return testenv.MetricValue(t, nt.metrics.pending.WithLabelValues("noc")) == 20 },
		waitFor, 20*time.Millisecond, "every device's notifications wait in Redis")
	f.srv.down.Store(false)
	require.Eventually(t, func() bool { return len(f.srv.slackTexts()) >= 40 }, waitFor, 50*time.Millisecond)
	texts := f.srv.slackTexts()
	for _, d := range opened {
		opened, recovered := -1, -1
		for i, text := range texts {
			switch {
			case strings.Contains(text, d+" (meter) interrupted"):
				opened = i
			case strings.Contains(text, d+" (meter) recovered"):
				recovered = i
			}
		}
		require.NotEqual(t, -1, opened, "%s's interruption was lost", d)
		require.Greater(t, recovered, opened, "%s: recovered after interrupted", d)
	}
	require.Eventually(t, func() bool { return testenv.MetricValue(t, nt.metrics.pending.WithLabelValues("noc")) == 0 },
		waitFor, 20*time.Millisecond)
	assert.Positive(t, counterValue(t, reg, "noc", resultFailed))
}

// counterValue reads heartbeatd_notifications_total{receiver, result} from reg.
func counterValue(t testing.TB, reg *prometheus.Registry, receiver, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != "heartbeatd_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["receiver"] == receiver && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestCheckNamesTheTemplateOrMatcherThatDoesNotParse(t *testing.T) {
	cfg, err := config.Parse([]byte(`types: {default: {}}
notify:
  receivers:
    - {name: noc, slack: {webhook_url: "${U}", text: "{{ .DeviceID "}}
    - {name: hook, webhook: {url: "http://h", body: "{{ nosuchfunc . }}"}}
  routes:
    - {receiver: noc, match: ['site=~"("']}
`), func(k string) (string, bool) { return "http://u", k == "U" })
	require.NoError(t, err)
	err = Check(cfg.Notify)
	require.Error(t, err)
	for _, want := range []string{"notify.receivers[0].slack.text", "notify.receivers[1].webhook.body", "nosuchfunc",
		"notify.routes[0].match"} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestDataSurvivesItsJSONForm(t *testing.T) {
	e := event.New(event.Interrupted, "dev-1", "meter", time.UnixMilli(1_795_340_000_000), time.UnixMilli(1_795_339_940_000),
		time.UnixMilli(1_795_340_000_012), 0)
	d := &Data{Event: e, Labels: map[string]string{"site": "ber"}, Receiver: "noc", Incident: e.ID}
	b, err := json.Marshal(d)
	require.NoError(t, err)
	var back Data
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, *d, back)
}

func TestANewGroupPagesAboutWhatHappensFromItsFirstStartNotAboutTheTopicsHistory(t *testing.T) {
	f := newFixture(t)
	old, _ := f.incident("old-1", "meter", 1)
	f.publish(old)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: tickets, webhook: {url: "{{url}}/hook"}, rate: 100/s, burst: 100}
  routes:
    - {receiver: tickets}
`, nil)
	nt, err := New(Options{Notify: n, Brokers: f.kafka.Addrs, Topic: testenv.EventsTopic, Redis: f.rdb, KeyPrefix: "hb"})
	require.NoError(t, err)
	// Its start offsets are set before it reads: an event published from now on is never skipped.
	_, err = nt.group().StartAtEnd(t.Context())
	require.NoError(t, err)
	fresh, _ := f.incident("new-1", "meter", 2)
	f.publish(fresh)
	f.run(nt)
	// old-1 sits at the start of its partition: every partition's later events coming through means it
	// was passed over, not delayed.
	var later []event.Event
	for _, d := range devices("later", 12) {
		e, _ := f.incident(d, "meter", 3)
		later = append(later, e)
	}
	f.publish(later...)
	require.Eventually(t, func() bool { return len(f.srv.hookRequests()) == 13 }, waitFor, 20*time.Millisecond)
	for _, h := range f.srv.hookRequests() {
		assert.NotContains(t, h.Body, `"device_id":"old-1"`)
	}
}

// ticketsWebhook is a notify section of one webhook receiver that every event reaches.
const ticketsWebhook = `
notify:
  receivers:
    - {name: tickets, webhook: {url: "{{url}}/hook"}}
  routes:
    - {receiver: tickets}
`

func TestARecordThatIsNoEventIsCountedAndSkipped(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(ticketsWebhook, nil)
	nt := f.newNotifier(n, nil)
	f.run(nt)
	require.NoError(t, f.producer.ProduceSync(t.Context(), &kgo.Record{Key: []byte("x"), Value: []byte("not json")}).FirstErr())
	good, _ := f.incident("dev-1", "meter", 1)
	good.DeviceID, good.ID = "x", event.ID("x", good.Deadline, good.Kind, 0) // the same partition as the bad record
	f.publish(good)
	require.Eventually(t, func() bool { return len(f.srv.hookRequests()) == 1 }, waitFor, 20*time.Millisecond)
	assert.Equal(t, 1.0, testenv.MetricValue(t, nt.metrics.badEvents))
}
