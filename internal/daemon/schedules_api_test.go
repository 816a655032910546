package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// POST /v1/silences takes matchers and time_intervals; what cannot be honoured is a 400 that says why.
func TestAPIRecurringAndMatcherSilences(t *testing.T) {
	f := newAPIFixture(t, "")
	code, created := f.call(t, "POST", "/v1/silences", "",
		`{"matchers":[{"label":"site","op":"=~","value":"ber.*"},{"label":"device_type","op":"=","value":"gateway"}],"for":"1h"}`)
	require.Equal(t, http.StatusCreated, code, created)
	require.Len(t, created["matchers"], 2)

	for bad, want := range map[string]string{
		`{"device_type":"gateway","time_intervals":["night"]}`:                      `time_intervals: "night" is not in the configuration's time_intervals`,
		`{"matchers":[{"label":"site","op":"=~","value":"("}],"for":"1h"}`:          "missing closing )",
		`{"matchers":[{"label":"site","op":"!=","value":"x"}],"for":"1h"}`:          "must not match the empty value",
		`{"matchers":[{"label":"site","op":"~","value":"x"}],"for":"1h"}`:           `op "~" is not one of =, !=, =~, !~`,
		`{"device_type":"gateway"}`:                                                 "until, for or time_intervals is required",
		`{"matchers":[{"label":"site","op":"=","value":"x","extra":1}],"for":"1h"}`: "unknown field",
	} {
		code, body := f.call(t, "POST", "/v1/silences", "", bad)
		require.Equal(t, http.StatusBadRequest, code, bad)
		require.Contains(t, body["error"], want, bad)
	}
}

// discard is an event sink that takes everything.
type discard struct{}

func (discard) Publish(_ context.Context, events []event.Event) []error {
	return make([]error, len(events))
}

// The device view and /v1/stats say what schedules do: a device whose deadline a quiet interval moved
// shows online with the moved deadline and until when its type is quiet; a scheduled device shows its
// real last signal.
func TestAPIShowsQuietAndExpectedTimes(t *testing.T) {
	cfg, err := config.Parse([]byte(`
time_intervals:
  - name: night
    time_intervals: [{times: [{start_time: "22:00", end_time: "24:00"}, {start_time: "00:00", end_time: "06:00"}]}]
types:
  default: {timeout: 1m, quiet: [night]}
  meter: {schedule: "0 2 * * *", grace: 30m, quiet: []}
`), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	pol := cfg.Policies()
	clock := testenv.NewClock(time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC))
	rdb := testenv.StartRedis(t).Client(t)
	timeout := func(typ string) time.Duration { p, _ := pol.Lookup(typ); return p.Timeout }
	store, err := deadline.New(rdb, deadline.Options{Slots: 4, Now: clock.Now, Timeout: timeout, Expected: pol.Expected})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.Load(ctx, pol.Names()...))
	now := clock.Now()
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{
		{Device: "sensor", Type: "default", Seen: now.Add(-2 * time.Minute)},
		{Device: "meter-1", Type: "meter", Seen: now.Add(-10 * time.Minute)}}))
	res, err := store.Claim(ctx, testenv.AllSlots(4), deadline.ClaimOptions{Now: now, Lease: 30 * time.Second, Batch: 10})
	require.NoError(t, err)
	h := alarm.NewHandler(alarm.HandlerOptions{Store: store, Sink: discard{}, Policies: func() *config.Policies { return pol }, Now: clock.Now})
	require.NoError(t, h.Handle(ctx, res.Claims))

	srv := httptest.NewServer(NewAPI(APIOptions{Store: store, Silences: silence.New(rdb, silence.Options{Now: clock.Now}),
		HoldBack: func() holdback.Status { return holdback.Status{} }, OwnedSlots: func() []int { return nil },
		Timeout: timeout, QuietUntil: pol.QuietUntil, QuietNow: pol.QuietNow, Now: clock.Now}))
	t.Cleanup(srv.Close)
	sixAM := "2026-11-23T06:00:00Z"
	_, dev := callJSON(t, srv.URL, "GET", "/v1/devices/sensor", "", "")
	require.Equal(t, "online", dev["state"], "a deadline in a quiet interval starts no incident")
	require.Equal(t, "2026-11-23T06:01:00Z", dev["deadline"], "moved to the interval's end + timeout")
	require.Equal(t, "2026-11-22T22:58:00Z", dev["last_seen"])
	require.Equal(t, sixAM, dev["quiet_until"])

	_, dev = callJSON(t, srv.URL, "GET", "/v1/devices/meter-1", "", "")
	require.Equal(t, "2026-11-23T02:30:00Z", dev["deadline"], "the next expected time + grace")
	require.Equal(t, "2026-11-22T22:50:00Z", dev["last_seen"], "the signal, not deadline − a timeout")
	require.Nil(t, dev["quiet_until"], "its type has no quiet intervals")

	_, list := callJSON(t, srv.URL, "GET", "/v1/devices?state=interrupted", "", "")
	require.Empty(t, list["devices"], "a deadline moved by a quiet interval is no incident")
	_, list = callJSON(t, srv.URL, "GET", "/v1/devices", "", "")
	require.Len(t, list["devices"], 1)
	listed := list["devices"].([]any)[0].(map[string]any)
	require.Equal(t, "meter-1", listed["device_id"])
	require.Equal(t, "2026-11-22T22:50:00Z", listed["last_seen"], "the listing shows the recorded signal too")

	_, stats := callJSON(t, srv.URL, "GET", "/v1/stats", "", "")
	require.Equal(t, map[string]any{"default": sixAM}, stats["quiet"])
}

// A silence whose matchers look at registered labels shows on the devices it selects, in the device view
// and the listing, and on no other.
func TestAPIViewShowsLabelMatcherSilences(t *testing.T) {
	f := newAPIFixture(t, "")
	registerSites(t, f)
	f.signal(t, "gw-1", "gateway", f.now)
	code, created := f.call(t, "POST", "/v1/silences", "", `{"matchers":[{"label":"site","op":"=","value":"berlin"}],"for":"1h"}`)
	require.Equal(t, http.StatusCreated, code, "%v", created)
	require.NoError(t, f.silences.Load(context.Background()))
	until := f.now.Add(time.Hour).UTC().Format(time.RFC3339Nano)
	for id, want := range map[string]any{"ber-1": until, "par-1": nil, "gw-1": nil} {
		code, out := f.call(t, "GET", "/v1/devices/"+id, "", "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, want, out["silenced_until"], id)
	}
	code, out := f.call(t, "GET", "/v1/devices", "", "")
	require.Equal(t, http.StatusOK, code)
	listed := map[string]any{}
	for _, d := range out["devices"].([]any) {
		listed[d.(map[string]any)["device_id"].(string)] = d.(map[string]any)["silenced_until"]
	}
	require.Equal(t, map[string]any{"ber-1": until, "par-1": nil, "gw-1": nil}, listed)
}

// keptEvents is an event sink that keeps what it is given.
type keptEvents struct{ events []event.Event }

func (r *keptEvents) Publish(_ context.Context, events []event.Event) []error {
	r.events = append(r.events, events...)
	return make([]error, len(events))
}

// A device of a @yearly type, registered or signalling, is expected at next New Year: it is not
// reported in its first minutes, the API shows New Year + grace as its deadline and its real last
// signal (the registration for one that never signalled), and it is reported once that deadline passes.
func TestYearlyDeviceIsExpectedAtNewYear(t *testing.T) {
	cfg, err := config.Parse([]byte(`
types:
  default: {timeout: 1m}
  yearly: {schedule: "@yearly", grace: 5m}
`), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	pol := cfg.Policies()
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	clock := testenv.NewClock(start)
	rdb := testenv.StartRedis(t).Client(t)
	timeout := func(typ string) time.Duration { p, _ := pol.Lookup(typ); return p.Timeout }
	store, err := deadline.New(rdb, deadline.Options{Slots: 4, Now: clock.Now, Timeout: timeout, Expected: pol.Expected})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.Load(ctx, pol.Names()...))
	srv := httptest.NewServer(NewAPI(APIOptions{Store: store, Silences: silence.New(rdb, silence.Options{Now: clock.Now}),
		HoldBack: func() holdback.Status { return holdback.Status{} }, OwnedSlots: func() []int { return nil },
		Timeout: timeout, KnownType: func(typ string) bool { _, ok := pol.Lookup(typ); return ok }, Now: clock.Now}))
	t.Cleanup(srv.Close)

	code, reg := callJSON(t, srv.URL, "PUT", "/v1/devices/archive-reg", "", `{"device_type":"yearly"}`)
	require.Equal(t, http.StatusOK, code, "%v", reg)
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "archive-sig", Type: "yearly", Seen: start}}))

	sink := &keptEvents{}
	h := alarm.NewHandler(alarm.HandlerOptions{Store: store, Sink: sink, Policies: func() *config.Policies { return pol }, Now: clock.Now})
	claim := func() {
		t.Helper()
		res, err := store.Claim(ctx, testenv.AllSlots(4), deadline.ClaimOptions{Now: clock.Now(), Lease: 30 * time.Second, Batch: 10})
		require.NoError(t, err)
		require.NoError(t, h.Handle(ctx, res.Claims))
	}
	for range 10 { // its first ten minutes, a claim a minute
		clock.Advance(time.Minute)
		claim()
	}
	require.Empty(t, sink.events, "a @yearly device is reported within minutes")

	newYear := "2027-01-01T00:05:00Z" // the next occurrence + grace
	for dev, lastSeen := range map[string]string{"archive-reg": "2026-05-01T10:00:00Z", "archive-sig": "2026-05-01T10:00:00Z"} {
		code, view := callJSON(t, srv.URL, "GET", "/v1/devices/"+dev, "", "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "online", view["state"], dev)
		require.Equal(t, newYear, view["deadline"], dev)
		require.Equal(t, lastSeen, view["last_seen"], dev)
	}

	clock.Set(time.Date(2027, 1, 1, 0, 4, 59, 0, time.UTC))
	claim()
	require.Empty(t, sink.events, "reported before its deadline")
	clock.Set(time.Date(2027, 1, 1, 0, 5, 0, 0, time.UTC))
	claim()
	var interrupted []string
	for _, e := range sink.events {
		require.Equal(t, event.Interrupted, e.Kind)
		interrupted = append(interrupted, e.DeviceID)
	}
	require.ElementsMatch(t, []string{"archive-reg", "archive-sig"}, interrupted)
}
