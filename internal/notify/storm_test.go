package notify

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

var foldedCount = regexp.MustCompile(`^heartbeatd: (\d+) notifications folded by the rate limit`)

func TestAStormBeyondTheRateLimitIsFoldedIntoSummariesNeverDropped(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: noc, slack: {webhook_url: "${SLACK_URL}"}, rate: 1/s, burst: 2}
  routes:
    - {receiver: noc}
`, map[string]string{"SLACK_URL": f.srv.URL + "/services/T0/B0/x"})
	reg := prometheus.NewRegistry()
	f.run(f.newNotifier(n, reg))

	const storm = 40
	var events []event.Event
	for _, d := range devices("meter", storm) {
		open, _ := f.incident(d, "meter", 1)
		events = append(events, open)
	}
	f.publish(events...)

	// Every interruption is told: on its own while the burst lasts, the rest in summaries.
	told := func() (single, folded, summaries int) {
		for _, text := range f.srv.slackTexts() {
			if m := foldedCount.FindStringSubmatch(text); m != nil {
				n, _ := strconv.Atoi(m[1])
				folded += n
				summaries++
				assert.Contains(t, text, "interrupted")
			} else {
				single++
			}
		}
		return single, folded, summaries
	}
	require.Eventually(t, func() bool { s, fo, _ := told(); return s+fo == storm }, waitFor, 50*time.Millisecond)
	single, folded, summaries := told()
	assert.LessOrEqual(t, single, 3, "the burst, and a token that came back meanwhile")
	assert.Positive(t, folded)
	assert.LessOrEqual(t, summaries, 3, "one summary per interval, not one per event")
	assert.Equal(t, float64(folded), counterValue(t, reg, "noc", resultFolded))
}

func TestOneMessagePerOutageAndNoneForAChildUnderItsDownParent(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: noc, slack: {webhook_url: "${SLACK_URL}"}, rate: 100/s, burst: 100}
    - {name: field, webhook: {url: "{{url}}/hook"}, rate: 100/s, burst: 100}
  routes:
    - {receiver: noc, match: ['device_type="meter"'], continue: true}
    - {receiver: field, match: ['site="ber"'], kinds: [interrupted, suppressed, recovered]}
`, map[string]string{"SLACK_URL": f.srv.URL + "/services/T0/B0/x"})
	reg := prometheus.NewRegistry()
	f.run(f.newNotifier(n, reg))

	// An outage of three meters: the members carry its id, their recoveries do not.
	start := f.t0.Add(time.Minute)
	started := event.New(event.OutageStarted, "outage:device_type:meter", "", start, time.Time{}, start, 0)
	started.OutageID, started.Group, started.Count, started.Sample = "o-1", &event.Group{By: "device_type", Value: "meter"}, 3,
		[]string{"m-0", "m-1", "m-2"}
	ended := event.New(event.OutageEnded, "outage:device_type:meter", "", start, time.Time{}, start.Add(time.Minute), 0)
	ended.OutageID, ended.Group, ended.Count, ended.Sample = "o-1", started.Group, 1, []string{"m-2"}
	f.publish(started)
	for _, d := range devices("m", 3) {
		open, closed := f.incident(d, "meter", 1)
		open.OutageID = "o-1"
		f.publish(open, closed)
	}
	// A gateway and its child, both at site ber: the child is suppressed under it.
	for _, d := range []string{"gw-1", "s-1"} {
		f.setLabels(d, map[string]string{"site": "ber"})
	}
	gwOpen, gwClosed := f.incident("gw-1", "gateway", 1)
	child := event.New(event.Suppressed, "s-1", "sensor", gwOpen.Deadline, gwOpen.LastSeen, gwOpen.At, 0)
	child.Parent = "gw-1"
	_, childClosed := f.incident("s-1", "sensor", 1)
	f.publish(gwOpen, child, childClosed, gwClosed, ended)

	require.Eventually(t, func() bool { return len(f.srv.slackTexts()) >= 2 && len(f.srv.hookRequests()) >= 2 },
		waitFor, 20*time.Millisecond)
	require.Eventually(t, func() bool { return counterValue(t, reg, "field", resultNoIncident) == 1 }, waitFor, 20*time.Millisecond,
		"the child's recovery was handled (not sent: its opening was the parent's)")
	texts := f.srv.slackTexts()
	require.Len(t, texts, 2, "%q", texts)
	assert.Contains(t, texts[0], "outage_started of 3 devices with device_type=meter: m-0, m-1, m-2")
	assert.Contains(t, texts[1], "outage_ended")
	assert.Equal(t, 3.0, counterValue(t, reg, "noc", resultInOutage))
	assert.Equal(t, 3.0, counterValue(t, reg, "noc", resultNoIncident), "the members' recoveries")

	var devs []string
	for _, h := range f.srv.hookRequests() {
		var d struct {
			Event event.Event `json:"event"`
		}
		require.NoError(t, json.Unmarshal([]byte(h.Body), &d))
		devs = append(devs, d.Event.DeviceID+" "+string(d.Event.Kind))
	}
	assert.Equal(t, "gw-1 interrupted, gw-1 recovered", strings.Join(devs, ", "))
	assert.Equal(t, 1.0, counterValue(t, reg, "field", resultUnderParent))
}

func TestANotifierStoppedMidStreamLeavesTheRestToTheNextFromTheCommittedOffset(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: tickets, webhook: {url: "{{url}}/hook"}, rate: 10000/s, burst: 10000}
  routes:
    - {receiver: tickets}
`, nil)
	first := f.run(f.newNotifier(n, nil))
	var want []string
	var events []event.Event
	for _, d := range devices("dev", 150) {
		open, closed := f.incident(d, "meter", 1)
		events = append(events, open, closed)
		want = append(want, open.ID, closed.ID)
	}
	f.publish(events...)
	require.Eventually(t, func() bool { return len(f.srv.hookRequests()) >= 40 }, waitFor, time.Millisecond)
	first() // mid-stream: what it handled and did not commit is read again
	atStop := len(f.srv.hookRequests())
	require.Less(t, atStop, len(want), "stopped before the end")

	f.run(f.newNotifier(n, nil))
	got := map[string]int{}
	require.Eventually(t, func() bool {
		for k := range got {
			delete(got, k)
		}
		for _, h := range f.srv.hookRequests() {
			var d struct {
				Event event.Event `json:"event"`
			}
			require.NoError(t, json.Unmarshal([]byte(h.Body), &d))
			got[d.Event.ID]++
		}
		return len(got) == len(want)
	}, waitFor, 50*time.Millisecond)
	for _, id := range want {
		assert.Positive(t, got[id], "lost: %s", id)
	}
	t.Logf("%d sent before the stop, %d notifications in all, %d events: resends are allowed, losses not",
		atStop, len(f.srv.hookRequests()), len(want))
}

func TestTwoNotifiersOfOneGroupShareTheTopicAndLoseNothing(t *testing.T) {
	f := newFixture(t)
	n := f.notifyConfig(`
notify:
  receivers:
    - {name: tickets, webhook: {url: "{{url}}/hook"}, rate: 10000/s, burst: 10000}
  routes:
    - {receiver: tickets}
`, nil)
	f.run(f.newNotifier(n, nil))
	f.run(f.newNotifier(n, nil))
	var events []event.Event
	want := map[string]bool{}
	for _, d := range devices("dev", 100) {
		open, closed := f.incident(d, "meter", 1)
		events = append(events, open, closed)
		want[open.ID], want[closed.ID] = true, true
	}
	f.publish(events...)
	require.Eventually(t, func() bool {
		got := map[string]bool{}
		for _, h := range f.srv.hookRequests() {
			var d struct {
				Event event.Event `json:"event"`
			}
			require.NoError(t, json.Unmarshal([]byte(h.Body), &d))
			got[d.Event.ID] = true
		}
		for id := range want {
			if !got[id] {
				return false
			}
		}
		return true
	}, waitFor, 50*time.Millisecond)
	t.Logf("%d notifications for %d events", len(f.srv.hookRequests()), len(want))
}
