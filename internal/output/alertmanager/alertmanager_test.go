package alertmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.Shared(m)) }

// posted is one alert as the fake Alertmanager received it.
type posted struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}

// fakeAM keeps the last alert posted per label set, as Alertmanager merges them; it can fail or stall.
type fakeAM struct {
	srv    *httptest.Server
	mu     sync.Mutex
	alerts map[string]posted
	posts  []int // alerts per POST that was answered 200
	fail   atomic.Bool
	stall  chan struct{} // non-nil: every POST waits until it is closed
	token  atomic.Value  // the Authorization header of the last POST
}

func newFakeAM(t *testing.T) *fakeAM {
	f := &fakeAM{alerts: map[string]posted{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.stall != nil {
			<-f.stall
		}
		if r.URL.Path != "/api/v2/alerts" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if f.fail.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		f.token.Store(r.Header.Get("Authorization"))
		var got []posted
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, a := range got {
			f.alerts[alert{labels: a.Labels}.key()] = a
		}
		f.posts = append(f.posts, len(got))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// active returns the alerts not ended at now, by device (or outage) id.
func (f *fakeAM) active(now time.Time) map[string]posted {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]posted{}
	for _, a := range f.alerts {
		if a.EndsAt.After(now) {
			out[a.Labels[labelDevice]+a.Labels[labelOutage]] = a
		}
	}
	return out
}

// activeFor returns every alert of device not ended at now: more than one is a duplicate.
func (f *fakeAM) activeFor(now time.Time, device string) []posted {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []posted
	for _, a := range f.alerts {
		if a.Labels[labelDevice] == device && a.EndsAt.After(now) {
			out = append(out, a)
		}
	}
	return out
}

// find returns the last alert posted whose labels include want.
func (f *fakeAM) find(want map[string]string) (posted, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.alerts {
		match := true
		for k, v := range want {
			match = match && a.Labels[k] == v
		}
		if match {
			return a, true
		}
	}
	return posted{}, false
}

func (f *fakeAM) postCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.posts)
}

var t0 = time.UnixMilli(1_795_340_000_000).UTC()

// fixture is an Output on a fake Alertmanager and a settable clock, run until the test ends.
type fixture struct {
	t     *testing.T
	am    *fakeAM
	out   *Output
	clock *testenv.Clock
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	f := &fixture{t: t, am: newFakeAM(t), clock: testenv.NewClock(t0)}
	opts.URLs = append(opts.URLs, f.am.srv.URL)
	if opts.ResendEvery == 0 {
		opts.ResendEvery = time.Hour // only the first round at start, unless a test asks for more
	}
	opts.Labels = map[string]string{"team": "iot"}
	opts.Now, opts.Logger = f.clock.Now, zaptest.NewLogger(t)
	out, err := New(opts)
	require.NoError(t, err)
	f.out = out
	return f
}

func (f *fixture) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.out.Run(ctx) }()
	f.t.Cleanup(func() { cancel(); <-done })
}

// await waits until cond holds of the fake Alertmanager's alerts.
func (f *fixture) await(what string, cond func() bool) {
	f.t.Helper()
	require.Eventually(f.t, cond, 10*time.Second, 5*time.Millisecond, what)
}

func incidentEvent(kind event.Kind, device, typ string, repeat int) event.Event {
	dl := t0.Add(-time.Minute)
	return event.New(kind, device, typ, dl, dl.Add(-30*time.Second), t0, repeat)
}

// Events become alerts: the labels of docs/events.md, startsAt at the deadline, endsAt four resends ahead
// while open; recovered, acked and deleted resolve with the labels the incident fired with; an
// exhausted device stays firing; watchdog and unsilenced make nothing; outages are DeviceOutage alerts.
func TestEventsBecomeAlerts(t *testing.T) {
	f := newFixture(t, Options{ResendEvery: time.Minute, Token: "am-s3cret"})
	f.run()
	child := incidentEvent(event.Suppressed, "child-1", "sensor", 0)
	child.Parent = "gw-1"
	member := incidentEvent(event.Interrupted, "member-1", "sensor", 0)
	member.OutageID = "outage:device_type:sensor/1"
	outage := event.New(event.OutageStarted, "outage:device_type:sensor", "", t0.Add(-time.Second), time.Time{}, t0, 0)
	outage.OutageID, outage.Group, outage.Count, outage.Sample = member.OutageID, &event.Group{By: "device_type", Value: "sensor"}, 50, []string{"member-1"}
	failed := incidentEvent(event.Interrupted, "pump-1", "sensor", 0)
	failed.Cause, failed.Reason = event.CauseReported, "valve stuck"
	f.out.Observe([]event.Event{
		failed,
		incidentEvent(event.Interrupted, "dev-1", "gateway", 0),
		incidentEvent(event.Interrupted, "dev-2", "gateway", 0),
		incidentEvent(event.Interrupted, "dev-3", "", 0),
		child, member, outage,
		event.New(event.Watchdog, "replica-1", "", time.Time{}, time.Time{}, t0, 0),
	})
	f.await("seven alerts", func() bool { return len(f.am.active(t0)) == 7 })
	a := f.am.active(t0)
	require.Equal(t, "reported", a["pump-1"].Annotations["cause"], "why, as the event says")
	require.Equal(t, "valve stuck", a["pump-1"].Annotations["reason"])
	require.Contains(t, a["pump-1"].Annotations["summary"], "pump-1 (sensor) is failed (reported) since")
	require.NotContains(t, a["pump-1"].Labels, "cause", "not a label: one learnt later would make another alert")
	require.Equal(t, map[string]string{"alertname": "DeviceSilent", "device_id": "dev-1", "device_type": "gateway", "team": "iot"}, a["dev-1"].Labels)
	require.Equal(t, t0.Add(-time.Minute), a["dev-1"].StartsAt, "startsAt = deadline")
	require.Equal(t, t0.Add(4*time.Minute), a["dev-1"].EndsAt, "endsAt = now + 4 × resend_every")
	require.Equal(t, map[string]string{"summary": "dev-1 (gateway) is silent since " + t0.Add(-90*time.Second).Format(time.RFC3339),
		"last_seen": t0.Add(-90 * time.Second).Format(time.RFC3339), "silent_for": "1m30s"}, a["dev-1"].Annotations)
	require.NotContains(t, a["dev-3"].Labels, "device_type", "an empty label is left out")
	require.Equal(t, "gw-1", a["child-1"].Labels["parent"])
	require.Equal(t, "gw-1", a["child-1"].Labels["inhibited_by"])
	require.Equal(t, member.OutageID, a["member-1"].Labels["inhibited_by"])
	require.Equal(t, map[string]string{"alertname": "DeviceOutage", "outage_id": member.OutageID, "group_by": "device_type",
		"group_value": "sensor", "team": "iot"}, a[member.OutageID].Labels)
	require.Equal(t, "Bearer am-s3cret", f.am.token.Load())

	f.clock.Set(t0.Add(time.Minute))
	now := f.clock.Now()
	ended := event.New(event.OutageEnded, outage.DeviceID, "", outage.Deadline, time.Time{}, now, 0)
	ended.OutageID, ended.Group = outage.OutageID, outage.Group
	recovered := incidentEvent(event.Recovered, "child-1", "sensor", 0)
	acked := incidentEvent(event.Acked, "dev-2", "gateway", 0)
	deleted := incidentEvent(event.Deleted, "dev-3", "", 0)
	f.out.Observe([]event.Event{recovered, acked, deleted, ended, incidentEvent(event.Exhausted, "dev-1", "gateway", 3),
		event.New(event.Unsilenced, "gateway", "gateway", time.Time{}, time.Time{}, now, 0)})
	f.await("dev-1, the failed pump and the outage member left", func() bool { return len(f.am.active(now)) == 3 })
	a = f.am.active(now)
	require.Contains(t, a, "dev-1", "an exhausted device is still silent")
	require.Equal(t, now.Add(4*time.Minute), a["dev-1"].EndsAt, "refreshed")
	require.Equal(t, t0.Add(-time.Minute), a["dev-1"].StartsAt, "the same start")
	require.Contains(t, a, "member-1")
	resolved, ok := f.am.find(map[string]string{"device_id": "child-1", "inhibited_by": "gw-1"})
	require.True(t, ok)
	require.Equal(t, now, resolved.EndsAt, "the suppressed child's alert resolved with the labels it fired with")
	require.True(t, resolved.StartsAt.Before(resolved.EndsAt))
}

// Observe returns at once while Alertmanager does not answer: past the queue it drops and counts.
func TestObserveNeverBlocks(t *testing.T) {
	f := newFixture(t, Options{QueueSize: 8, Timeout: time.Minute})
	f.am.stall = make(chan struct{})
	f.run()
	t.Cleanup(func() { close(f.am.stall) }) // before the fixture's stop: the post in flight ends
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for i := range 1000 {
			f.out.Observe([]event.Event{incidentEvent(event.Interrupted, fmt.Sprintf("d-%d", i), "", 0)})
		}
	}()
	select {
	case <-observed:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe blocked on a stalled Alertmanager")
	}
	// At most the queue and the one batch taken from it are kept.
	require.GreaterOrEqual(t, testenv.MetricValue(t, f.out.dropped), float64(1000-8-defaultBatch))
	require.LessOrEqual(t, testenv.MetricValue(t, f.out.queued), 8.0)
}

// While Alertmanager fails, resolves are kept and posted on its return, and the open incidents are
// posted again at once then (re-sync), so both a recovery and an interruption during the outage show.
func TestAlertmanagerOutageKeepsResolves(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	st := newStoreFixture(t, rdb)
	st.open(t, "d1", "d2")
	f := newFixture(t, Options{Store: st.store, Slots: func() []int { return testenv.AllSlots(4) }})
	f.run()
	f.await("both fire", func() bool { return len(f.am.active(t0)) == 2 })

	f.am.fail.Store(true)
	st.open(t, "d3") // interrupted while Alertmanager is down
	f.out.Observe([]event.Event{st.event(event.Interrupted, "d3"), st.event(event.Recovered, "d1")})
	st.end(t, "d1")
	require.Eventually(t, func() bool { return testenv.MetricValue(t, f.out.posts.WithLabelValues(resultFailed)) >= 2 },
		10*time.Second, 5*time.Millisecond, "the posts fail and are retried")
	require.Contains(t, f.am.active(t0), "d1", "not resolved while down")

	f.am.fail.Store(false)
	f.await("d1 resolved, d3 firing", func() bool {
		a := f.am.active(t0)
		_, d1 := a["d1"]
		_, d3 := a["d3"]
		return !d1 && d3 && len(a) == 2
	})
}

// The re-sync posts each open incident of the owned slots once per round: acknowledged, silenced and
// unreported incidents are left out, and two replicas owning half the slots each post disjoint halves.
func TestResyncPostsTheOwnedSlots(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	st := newStoreFixture(t, rdb)
	var all []string
	for i := range 40 {
		all = append(all, fmt.Sprintf("dev-%02d", i))
	}
	st.open(t, all...)
	st.open(t, "acked", "silenced")
	ok, err := st.store.SetAcked(context.Background(), "acked", 0)
	require.NoError(t, err)
	require.True(t, ok)
	st.unreported(t, "fresh")

	seen := map[string]int{}
	for _, half := range [][]int{{0, 1}, {2, 3}} {
		f := newFixture(t, Options{Store: st.store, Slots: func() []int { return half },
			Silenced: func(device, _ string, _ time.Time) bool { return device == "silenced" }})
		f.run()
		want := 0
		for _, d := range append(slices.Clone(all), "acked", "silenced", "fresh") {
			if slices.Contains(half, deadline.Slot(d, 4)) && d != "acked" && d != "silenced" && d != "fresh" {
				want++
			}
		}
		f.await("the half's devices", func() bool { return len(f.am.active(t0)) == want })
		for d, a := range f.am.active(t0) {
			seen[d]++
			require.Contains(t, half, deadline.Slot(d, 4), "%s is not in the replica's slots", d)
			require.Equal(t, st.deadline, a.StartsAt)
			require.Equal(t, st.deadline.Add(-30*time.Second).Format(time.RFC3339), a.Annotations["last_seen"])
		}
	}
	require.Len(t, seen, len(all), "every open incident, once")
	for d, n := range seen {
		require.Equal(t, 1, n, d)
	}
}

// A suppressed child's alert carries inhibited_by whether the replica saw its event or reads it from
// Redis, and keeps the labels it fired with when its parent link changes.
func TestResyncKeepsTheLabelsAnIncidentFiredWith(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	st := newStoreFixture(t, rdb)
	ctx := context.Background()
	st.openWith(t, "child-1", deadline.State{Next: 1, Hold: deadline.HoldParent})
	st.open(t, "plain-1")
	require.NoError(t, st.store.Links().SetParent(ctx, "child-1", "gw-1"))
	require.NoError(t, st.store.Links().SetParent(ctx, "plain-1", "gw-1"))

	fresh := newFixture(t, Options{Store: st.store, Slots: func() []int { return testenv.AllSlots(4) }})
	fresh.run()
	fresh.await("both", func() bool { return len(fresh.am.active(t0)) == 2 })
	a := fresh.am.active(t0)
	require.Equal(t, "gw-1", a["child-1"].Labels["inhibited_by"], "suppressed, read from its hold")
	require.Equal(t, "gw-1", a["plain-1"].Labels["parent"])
	require.NotContains(t, a["plain-1"].Labels, "inhibited_by")

	// A replica that fired the child under its first parent keeps those labels through a re-sync after
	// the link changed.
	f := newFixture(t, Options{Store: st.store, Slots: func() []int { return testenv.AllSlots(4) }, ResendEvery: time.Second})
	suppressed := st.event(event.Suppressed, "child-1")
	suppressed.Parent = "gw-1"
	f.out.Observe([]event.Event{suppressed})
	f.run()
	f.await("the child fired", func() bool { _, ok := f.am.active(t0)["child-1"]; return ok })
	require.NoError(t, st.store.Links().SetParent(ctx, "child-1", "gw-2"))
	later := t0.Add(2 * time.Second)
	f.clock.Set(later)
	f.await("a re-sync round after the change", func() bool {
		return f.am.active(later)["child-1"].EndsAt.Equal(later.Add(4 * time.Second))
	})
	child := f.am.activeFor(later, "child-1")
	require.Len(t, child, 1, "one alert per incident: %v", child)
	require.Equal(t, map[string]string{"alertname": "DeviceSilent", "device_id": "child-1", "device_type": "default",
		"parent": "gw-1", "inhibited_by": "gw-1", "team": "iot"}, child[0].Labels)
}

// A resolve is final even when a re-sync reads the incident before its end reaches Redis (the event is
// observed before the alarm loop settles the claim).
func TestResyncDoesNotRefireWhatWasJustResolved(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	st := newStoreFixture(t, rdb)
	st.open(t, "d1", "d2")
	f := newFixture(t, Options{Store: st.store, Slots: func() []int { return testenv.AllSlots(4) }, ResendEvery: time.Second})
	f.run()
	f.await("both fire", func() bool { return len(f.am.active(t0)) == 2 })
	f.out.Observe([]event.Event{st.event(event.Recovered, "d1")}) // still open in Redis
	f.await("d1 resolved", func() bool { return len(f.am.activeFor(t0, "d1")) == 0 })
	later := t0.Add(time.Second)
	f.clock.Set(later)
	f.await("a re-sync round", func() bool {
		d2 := f.am.activeFor(later, "d2")
		return len(d2) == 1 && d2[0].EndsAt.Equal(later.Add(4*time.Second))
	})
	require.Empty(t, f.am.activeFor(later, "d1"), "not fired again by the re-sync")
}

// A type silence resolves every open alert of that type, wherever it was fired.
func TestTypeSilenceResolvesItsType(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	st := newStoreFixture(t, rdb)
	st.open(t, "g1", "g2")
	st.openTyped(t, "gateway", "gw-1", "gw-2", "gw-3")
	f := newFixture(t, Options{Store: st.store, Slots: func() []int { return testenv.AllSlots(4) },
		Silence: func(id string) (string, string, bool) { return "", "gateway", id == "s1" }})
	f.run()
	f.await("all five", func() bool { return len(f.am.active(t0)) == 5 })
	f.clock.Set(t0.Add(time.Second))
	silenced := event.New(event.Silenced, "gateway", "gateway", time.Time{}, time.Time{}, f.clock.Now(), 0)
	silenced.ID = "silence/s1/silenced"
	f.out.Observe([]event.Event{silenced})
	f.await("the gateways resolved", func() bool {
		a := f.am.active(f.clock.Now())
		_, g1 := a["g1"]
		_, g2 := a["g2"]
		return len(a) == 2 && g1 && g2
	})
}

// storeFixture opens incidents in a real Redis as the alarm loop leaves them.
type storeFixture struct {
	store    *deadline.Store
	deadline time.Time
}

func newStoreFixture(t *testing.T, rdb redis.UniversalClient) *storeFixture {
	t.Helper()
	timeout := func(string) time.Duration { return 30 * time.Second }
	opts := deadline.Options{Slots: 4, Now: func() time.Time { return t0 }, Timeout: timeout}
	return &storeFixture{store: deadlinetest.NewStore(t, rdb, opts, "default", "gateway"), deadline: t0.Add(-time.Minute)}
}

// open records an interruption sent for each device, its deadline a minute before t0.
func (s *storeFixture) open(t *testing.T, devices ...string) { s.openTyped(t, "", devices...) }

func (s *storeFixture) openTyped(t *testing.T, typ string, devices ...string) {
	t.Helper()
	for _, d := range devices {
		s.openAs(t, d, typ, deadline.State{Next: 1})
	}
}

func (s *storeFixture) openWith(t *testing.T, device string, st deadline.State) {
	s.openAs(t, device, "", st)
}

// unreported opens an incident whose interruption was not sent yet.
func (s *storeFixture) unreported(t *testing.T, device string) {
	s.openAs(t, device, "", deadline.State{})
}

func (s *storeFixture) openAs(t *testing.T, device, typ string, want deadline.State) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.store.Refresh(ctx, []deadline.Signal{{Device: device, Type: typ, Seen: s.deadline.Add(-30 * time.Second)}}))
	res, err := s.store.Claim(ctx, testenv.AllSlots(4), deadline.ClaimOptions{Now: t0, Lease: time.Minute, Batch: 100})
	require.NoError(t, err)
	require.Len(t, res.Claims, 1)
	c := res.Claims[0]
	st := c.State
	st.Next, st.Hold, st.InterruptedAt = want.Next, want.Hold, 0
	if want.Next > 0 {
		st.InterruptedAt = t0.UnixMilli()
	}
	_, err = s.store.Settle(ctx, []deadline.Ack{{Device: c.Device, Slot: c.Slot, Op: deadline.Reschedule, Claimed: st.Deadline,
		Next: t0.Add(time.Hour), State: st}}, deadline.RecordsOf(res.Claims))
	require.NoError(t, err)
}

// end removes an incident, as the alarm loop does after its recovery.
func (s *storeFixture) end(t *testing.T, device string) {
	t.Helper()
	ok, err := s.store.Delete(context.Background(), device)
	require.NoError(t, err)
	require.True(t, ok)
}

func (s *storeFixture) event(kind event.Kind, device string) event.Event {
	return event.New(kind, device, "default", s.deadline, s.deadline.Add(-30*time.Second), t0, 0)
}

// The re-sync marks outage members as their interrupted events did (OutageOf), and the replica owning
// slot 0 re-posts the open outages' DeviceOutage alerts; the others do not.
func TestResyncPostsOutagesAndMarksTheirMembers(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	st := newStoreFixture(t, rdb)
	st.open(t, "member-1", "before-1")
	outage := correlate.Outage{ID: "outage:device_type:default/1", Group: event.Group{By: "device_type", Value: "default"},
		StartedAt: t0.Add(-time.Second), Count: 50, Sample: []string{"member-1"}}
	var asked sync.Map // device → InterruptedAt as OutageOf was told it
	opts := func(slots []int, resend time.Duration) Options {
		return Options{Store: st.store, Slots: func() []int { return slots }, ResendEvery: resend,
			Outages: func(context.Context) ([]correlate.Outage, error) { return []correlate.Outage{outage}, nil },
			OutageOf: func(_ context.Context, incs []Incident) ([]string, error) {
				out := make([]string, len(incs))
				for i, inc := range incs {
					asked.Store(inc.Device, inc.InterruptedAt)
					if inc.Device == "member-1" {
						out[i] = outage.ID
					}
				}
				return out, nil
			}}
	}
	owner := newFixture(t, opts(testenv.AllSlots(4), 0))
	owner.run()
	owner.await("three alerts", func() bool { return len(owner.am.active(t0)) == 3 })
	a := owner.am.active(t0)
	require.Equal(t, outage.ID, a["member-1"].Labels["inhibited_by"])
	require.NotContains(t, a["before-1"].Labels, "inhibited_by")
	require.Equal(t, "DeviceOutage", a[outage.ID].Labels["alertname"])
	require.Equal(t, outage.StartedAt, a[outage.ID].StartsAt)
	at, ok := asked.Load("member-1")
	require.True(t, ok)
	require.True(t, t0.Equal(at.(time.Time)), "asked with the time its interruption was reported: %v", at)

	// Another replica's rounds post its slots' devices, never the outage.
	var others []string
	for i := range 12 {
		d := fmt.Sprintf("other-%02d", i)
		st.open(t, d)
		if deadline.Slot(d, 4) != 0 {
			others = append(others, d)
		}
	}
	require.NotEmpty(t, others)
	other := newFixture(t, opts([]int{1, 2, 3}, time.Second))
	other.run()
	other.await("its devices", func() bool { _, ok := other.am.active(t0)[others[0]]; return ok })
	posts := other.am.postCount()
	other.await("a second round, so the first is over", func() bool { return other.am.postCount() > posts })
	require.NotContains(t, other.am.active(t0), outage.ID, "only slot 0's owner posts the outages")
}
