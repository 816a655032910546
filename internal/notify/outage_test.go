package notify

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// massSilence is a fleet falling silent at once, as the events topic tells it: members of one
// correlated outage of device_type meter (outage_started, each member's interrupted with the outage's
// id, their recoveries, outage_ended), and children suppressed under their down gateway gw-1 (its
// interrupted, their suppressed, their recoveries, its recovery).
type massSilence struct{ members, children int }

// outageRoute takes every kind the mass silence's events have, so each is routed and either sent or
// held for the outage's or the parent's message.
const outageRoute = `
notify:
  receivers:
    - {name: noc, slack: {webhook_url: "${SLACK_URL}"}}
  routes:
    - {receiver: noc, kinds: [interrupted, suppressed, recovered, outage_started, outage_ended]}
`

// publish writes the mass silence to the events topic in chunks, as detection would.
func (m massSilence) publish(f *fixture) {
	start := f.t0.Add(time.Minute)
	group := &event.Group{By: "device_type", Value: "meter"}
	started := event.New(event.OutageStarted, "outage:device_type:meter", "", start, time.Time{}, start, 0)
	started.OutageID, started.Group, started.Count, started.Sample = "o-1", group, m.members, devices("m", min(m.members, 20))
	ended := event.New(event.OutageEnded, "outage:device_type:meter", "", start, time.Time{}, start.Add(time.Minute), 0)
	ended.OutageID, ended.Group, ended.Count = "o-1", group, m.members
	gwOpen, gwClosed := f.incident("gw-1", "gateway", 1)

	var opens, closes []event.Event
	for _, d := range devices("m", m.members) {
		open, closed := f.incident(d, "meter", 1)
		open.OutageID = "o-1"
		opens, closes = append(opens, open), append(closes, closed)
	}
	for _, d := range devices("s", m.children) {
		child := event.New(event.Suppressed, d, "sensor", gwOpen.Deadline, gwOpen.LastSeen, gwOpen.At, 0)
		child.Parent = "gw-1"
		_, closed := f.incident(d, "sensor", 1)
		opens, closes = append(opens, child), append(closes, closed)
	}
	f.publish(started, gwOpen)
	for _, part := range [][]event.Event{opens, closes} {
		for i := 0; i < len(part); i += 10_000 {
			f.publish(part[i:min(i+10_000, len(part))]...)
		}
	}
	f.publish(gwClosed, ended)
}

// await waits until the notifier handled every event of the mass silence (each is counted under one
// result) and returns the messages the receiver got.
func (m massSilence) await(t testing.TB, f *fixture, reg *prometheus.Registry) []string {
	t.Helper()
	handled := func() bool {
		return counterValue(t, reg, "noc", resultInOutage) == float64(m.members) &&
			counterValue(t, reg, "noc", resultUnderParent) == float64(m.children) &&
			counterValue(t, reg, "noc", resultNoIncident) == float64(m.members+m.children) &&
			counterValue(t, reg, "noc", resultSent) == 4
	}
	require.Eventually(t, handled, 5*time.Minute, 100*time.Millisecond, "not every event handled: sent %v", f.srv.slackTexts())
	return f.srv.slackTexts()
}

// A fleet falling silent under one outage and one parent reaches the receiver as four messages: the
// outage's start and end, the parent's interruption and recovery. No member or child is sent on its
// own, nor folded into a summary.
func TestAMassSilenceUnderOneOutageAndOneParentReachesTheReceiverAsFourMessages(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	f.run(f.newNotifier(f.notifyConfig(outageRoute, map[string]string{"SLACK_URL": f.srv.URL + "/services/T0/B0/x"}), reg))
	m := massSilence{members: 2000, children: 500}
	m.publish(f)
	texts := m.await(t, f, reg)
	t.Logf("%d devices silent (%d in the outage, %d under the gateway): %d messages", m.members+m.children+1, m.members, m.children, len(texts))
	require.Len(t, texts, 4, "%q", texts)
	// Devices' events are ordered per device only: the four messages in any order, each once.
	for _, want := range []string{"outage_started of 2000 devices with device_type=meter", "gw-1 (gateway) interrupted",
		"gw-1 (gateway) recovered", "outage_ended"} {
		n := 0
		for _, text := range texts {
			if strings.Contains(text, want) {
				n++
			}
		}
		assert.Equal(t, 1, n, "%q in %q", want, texts)
	}
	assert.Zero(t, counterValue(t, reg, "noc", resultFolded), "nothing folded: no summary stands for a member")
}

// BenchmarkMassSilenceMessages makes 100,000 devices fall silent (and recover) under one correlated
// outage, and 100,000 under one down parent, and reports how many messages reached the receiver for
// each (messages: 4, the outage's start and end and the gateway's interruption and recovery, which both
// cases publish), and how fast the notifier worked through their events (events/s).
//
//	go test -run '^$' -bench MassSilenceMessages -benchtime 1x ./internal/notify/
func BenchmarkMassSilenceMessages(b *testing.B) {
	for _, m := range []massSilence{{members: 100_000}, {children: 100_000}} {
		name := "outage"
		if m.children > 0 {
			name = "parent"
		}
		b.Run(fmt.Sprintf("%s/devices=%d", name, m.members+m.children), func(b *testing.B) {
			var messages int
			var perSecond float64
			for range b.N {
				f := newFixture(b)
				reg := prometheus.NewRegistry()
				f.run(f.newNotifier(f.notifyConfig(outageRoute, map[string]string{"SLACK_URL": f.srv.URL + "/services/T0/B0/x"}), reg))
				start := time.Now()
				m.publish(f)
				messages = len(m.await(b, f, reg))
				perSecond = float64(2*(m.members+m.children)+4) / time.Since(start).Seconds()
			}
			b.ReportMetric(float64(messages), "messages")
			b.ReportMetric(perSecond, "events/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
