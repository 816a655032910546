package notify

import (
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
