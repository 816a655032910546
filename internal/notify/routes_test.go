package notify

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func TestRoutesFirstMatchWinsUnlessContinue(t *testing.T) {
	cfg, err := config.Parse([]byte(`types: {default: {}}
notify:
  receivers:
    - {name: oncall, webhook: {url: "http://a"}}
    - {name: noc, webhook: {url: "http://b"}}
    - {name: ops, webhook: {url: "http://c"}}
  routes:
    - {match: ['site="ber-2"'], receiver: ops, kinds: [outage_started]}
    - {match: ['device_type="gateway"', 'site=~"ber.*"'], receiver: oncall, continue: true}
    - {match: ['cause="reported"'], receiver: ops, kinds: [interrupted, late]}
    - {receiver: noc, kinds: [interrupted, recovered, outage_started, acked]}
    - {receiver: ops, repeat: true}
`), nil)
	require.NoError(t, err)
	_, rs, err := build(cfg.Notify, nil)
	require.NoError(t, err)

	ev := func(kind event.Kind, device, typ string, detail event.Detail) *event.Event {
		at := time.UnixMilli(1_795_340_000_000)
		e := event.New(kind, device, typ, at, at.Add(-time.Minute), at, 0)
		e.Detail = detail
		return &e
	}
	noLabels := func() map[string]string { return nil }
	for _, tc := range []struct {
		name   string
		e      *event.Event
		labels map[string]string
		want   []hit
	}{
		{"a gateway at ber goes on to the next route", ev(event.Interrupted, "gw-1", "gateway", event.Detail{}),
			map[string]string{"site": "ber-1"}, []hit{{receiver: "oncall"}, {receiver: "noc"}}},
		{"elsewhere it does not match the first", ev(event.Interrupted, "gw-2", "gateway", event.Detail{}),
			map[string]string{"site": "muc"}, []hit{{receiver: "noc"}}},
		{"a reported failure stops at its route", ev(event.Interrupted, "p-1", "pump", event.Detail{Cause: event.CauseReported}),
			nil, []hit{{receiver: "ops"}}},
		{"a route that does not take the kind lets it pass", ev(event.Recovered, "p-1", "pump", event.Detail{Cause: event.CauseReported}),
			nil, []hit{{receiver: "noc"}}},
		{"a repeat only where repeat is set", ev(event.Alarm, "p-1", "pump", event.Detail{}), nil, []hit{{receiver: "ops"}}},
		{"a watchdog nowhere", ev(event.Watchdog, "replica-1", "", event.Detail{}), nil, nil},
		{"deleted goes where recovered goes", ev(event.Deleted, "m-1", "meter", event.Detail{}), nil, []hit{{receiver: "noc"}}},
		{"an outage member is the outage's message", ev(event.Interrupted, "m-1", "meter", event.Detail{OutageID: "o-1"}),
			nil, []hit{{receiver: "noc", held: resultInOutage}}},
		{"an outage matches as its group", ev(event.OutageStarted, "outage:labels.site:ber-2", "",
			event.Detail{OutageID: "o-2", Group: &event.Group{By: "labels.site", Value: "ber-2"}}), nil, []hit{{receiver: "ops"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, rs.match(tc.e, tc.labels, noLabels))
		})
	}
}

func TestHumanizeDurationTakesDurationsAndMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{{int64(90_000), "1m30s"}, {90 * time.Second, "1m30s"}, {"90s", ""}, {int64(1500), "2s"}, {int64(250), "250ms"}} {
		got, err := humanizeDuration(tc.in)
		if tc.want == "" {
			assert.Error(t, err, "%v", tc.in)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
}

func TestAnOpeningIsNewsOnceAndAnEscalationStaysInItsIncident(t *testing.T) {
	at := time.UnixMilli(1_795_340_000_000)
	last := at.Add(-time.Minute)
	open := func(kind event.Kind, lastSeen time.Time) *event.Event {
		e := event.New(kind, "dev-1", "meter", at, lastSeen, at, 0)
		return &e
	}
	mark := func(id string, since time.Time, kinds string) string {
		return id + "|" + strconv.FormatInt(since.UnixMilli(), 10) + "|" + kinds
	}
	for _, tc := range []struct {
		name      string
		mark      string
		e         *event.Event
		incident  string
		same, dup bool
	}{
		{"nothing told yet: a new incident of its own id", "", open(event.Interrupted, last), open(event.Interrupted, last).ID, false, false},
		{"the same opening again", mark("dev-1/1/interrupted/0", last, "interrupted"), open(event.Interrupted, last), "dev-1/1/interrupted/0", true, true},
		{"late, then interrupted", mark("dev-1/1/late/0", last, "late"), open(event.Interrupted, last), "dev-1/1/late/0", true, false},
		{"suppressed, then its own timeout after the parent's recovery", mark("dev-1/1/suppressed/0", last, "suppressed"),
			open(event.Interrupted, last.Add(time.Hour)), "dev-1/1/suppressed/0", true, false},
		{"a later incident whose predecessor's close went elsewhere", mark("dev-1/1/interrupted/0", last, "interrupted"),
			open(event.Interrupted, last.Add(time.Hour)), open(event.Interrupted, last.Add(time.Hour)).ID, false, false},
		{"a late of a later incident", mark("dev-1/1/interrupted/0", last, "interrupted"), open(event.Late, last.Add(time.Hour)),
			open(event.Late, last.Add(time.Hour)).ID, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			incident, same, dup := opening(tc.mark, tc.e)
			assert.Equal(t, tc.incident, incident)
			assert.Equal(t, tc.same, same)
			assert.Equal(t, tc.dup, dup)
		})
	}
}
