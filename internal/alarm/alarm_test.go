package alarm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const eventsTopic = "heartbeat.events"

const policyYAML = `
types:
  default: {timeout: 10s, repeat_every: 1m, max_repeats: 2}
  gateway: {timeout: 5s, repeat_every: 30s, max_repeats: 0}
  sensor:  {timeout: 20s, repeat_every: 0s}
`

// fixture is the shared one (deadlinetest.Fixture), whose clock the store, the handler and the test share,
// with a Kafka the handler publishes to through sink, which keeps what Kafka acknowledged.
type fixture struct {
	*deadlinetest.Fixture
	t        *testing.T
	kafka    *testenv.Kafka
	sink     *testenv.EventLog
	handler  *Handler
	silences *silence.Silences
	policies atomic.Pointer[config.Policies]
}

func parsePolicies(t testing.TB, yml string) *config.Policies {
	t.Helper()
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	return cfg.Policies()
}

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// eachFixture runs test once per Redis backend (testenv.EachBackend), each time on an empty Redis with a
// fresh fixture: the alarm state machine must behave the same on both.
func eachFixture(t *testing.T, test func(t *testing.T, f *fixture)) {
	t.Helper()
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) { test(t, setup(t, rdb)) })
}

func setup(t *testing.T, rdb redis.UniversalClient) *fixture {
	t.Helper()
	f := &fixture{t: t, kafka: testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{eventsTopic}})}
	f.policies.Store(parsePolicies(t, policyYAML))
	timeout := func(typ string) time.Duration { p, _ := f.policies.Load().Lookup(typ); return p.Timeout }
	repeat := func(typ string) time.Duration { p, _ := f.policies.Load().Lookup(typ); return p.RepeatEvery }
	warnAfter := func(typ string) time.Duration { p, _ := f.policies.Load().Lookup(typ); return p.WarnAfter }
	expected := func(typ string, seen time.Time) (time.Time, bool) { return f.policies.Load().Expected(typ, seen) }
	f.Fixture = deadlinetest.Open(t, rdb, deadline.Options{Slots: 8, Timeout: timeout, RepeatEvery: repeat, WarnAfter: warnAfter,
		Expected: expected},
		f.policies.Load().Names()...)
	pub, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: f.kafka.Addrs, Topic: eventsTopic, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	f.sink = &testenv.EventLog{Next: pub}
	f.silences = silence.New(f.RDB, silence.Options{Now: f.Clock.Now})
	f.handler = f.newHandler()
	return f
}

func (f *fixture) newHandler() *Handler {
	return NewHandler(HandlerOptions{Store: f.Store, Sink: f.sink, Policies: f.policies.Load, Silences: f.silences,
		MaxPublishAttempts: 3, Refused: eventkafka.Refused, Now: f.Clock.Now, Logger: zaptest.NewLogger(f.t)})
}

// signal records a signal of device at the given offset from T0.
func (f *fixture) signal(device, typ string, at time.Duration) {
	f.t.Helper()
	f.Signal(f.t, device, typ, at)
}

// at moves the clock to t0+d, claims every due device (as often as batches are full) and hands the claims
// to h; it returns the events published.
func (f *fixture) at(d time.Duration, watermark ...time.Time) []string {
	f.t.Helper()
	return f.stepWith(f.handler, d, watermark...)
}

func (f *fixture) stepWith(h *Handler, d time.Duration, watermark ...time.Time) []string {
	f.t.Helper()
	f.Clock.Set(f.T0.Add(d))
	var opts deadline.ClaimOptions
	if len(watermark) > 0 {
		opts.Watermark = watermark[0]
	}
	res := f.ClaimAll(f.t, opts)
	if err := h.Handle(context.Background(), res.Claims); err != nil && !errors.Is(err, errCrashed) {
		require.NoError(f.t, err)
	}
	return ids(f.sink.Take())
}

// step is fixture.at returning the events themselves.
func (f *fixture) step(d time.Duration) []event.Event {
	f.t.Helper()
	require.NoError(f.t, f.handler.Handle(context.Background(), f.claimOnly(d)))
	return f.sink.Take()
}

// claimOnly moves the clock to T0+d and claims every due device, as a replica does just before it dies.
func (f *fixture) claimOnly(d time.Duration) []deadline.Claim {
	f.t.Helper()
	f.Clock.Set(f.T0.Add(d))
	return f.ClaimAll(f.t, deadline.ClaimOptions{}).Claims
}

func ids(events []event.Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s %s %d", e.DeviceID, e.Kind, e.Repeat))
	}
	sort.Strings(out)
	return out
}

func TestLifecycleInterruptedRepeatsExhausted(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "", 0) // default: timeout 10s, repeat 1m, max 2
		require.Empty(t, f.at(9*time.Second))
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(10*time.Second+5*time.Millisecond))
		require.Empty(t, f.at(40*time.Second), "no repeat before repeat_every")
		require.Equal(t, []string{"d1 alarm 1"}, f.at(70*time.Second+5*time.Millisecond))
		require.Equal(t, []string{"d1 alarm 2", "d1 exhausted 2"}, f.at(130*time.Second+5*time.Millisecond))
		require.Empty(t, f.at(time.Hour), "exhausted: no more alarms")

		// What Kafka holds: the same events, in order, keyed by device, with the fields of docs/events.md.
		recs := f.kafka.ReadAll(t, eventsTopic, 4, 10*time.Second)
		require.Len(t, recs, 4)
		var kinds []event.Kind
		for _, r := range recs {
			require.Equal(t, "d1", string(r.Key))
			e, err := event.Decode(r.Value)
			require.NoError(t, err)
			require.Equal(t, f.T0.Add(10*time.Second).UTC(), e.Deadline)
			require.Equal(t, f.T0.UTC(), e.LastSeen)
			kinds = append(kinds, e.Kind)
		}
		require.Equal(t, []event.Kind{event.Interrupted, event.Alarm, event.Alarm, event.Exhausted}, kinds)

		// An exhausted device still reports its recovery.
		f.signal("d1", "", time.Hour+time.Second)
		require.Equal(t, []string{"d1 recovered 0"}, f.at(time.Hour+time.Second+time.Millisecond))
	})
}

func TestRecoveryBetweenRepeatsStopsThem(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "gateway", 0) // timeout 5s, repeat 30s
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(5*time.Second+2*time.Millisecond))
		require.Equal(t, []string{"d1 alarm 1"}, f.at(35*time.Second+2*time.Millisecond))
		f.signal("d1", "", 50*time.Second) // the probe makes the incident due at once
		require.Equal(t, []string{"d1 recovered 0"}, f.at(50*time.Second+time.Millisecond))
		f.signal("d1", "", 62*time.Second)
		require.Empty(t, f.at(65*time.Second+5*time.Millisecond), "no repeat 2 after recovery")
		d, found, err := f.Store.Device(context.Background(), "d1")
		require.NoError(t, err)
		require.True(t, found)
		require.True(t, d.Online())
		require.Equal(t, f.T0.Add(67*time.Second), d.Deadline)
		// Silent again: a new incident with its own ids.
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(67*time.Second+3*time.Millisecond))
	})
}

func TestRecoveredCarriesOutageLength(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "gateway", 0)
		f.at(5*time.Second + time.Millisecond)
		f.sink.Take()
		f.signal("d1", "", 47*time.Second)
		f.Clock.Set(f.T0.Add(47*time.Second + time.Millisecond))
		res, err := f.Store.Claim(context.Background(), testenv.AllSlots(8), deadline.ClaimOptions{Now: f.Clock.Now(), Lease: time.Minute, Batch: 10})
		require.NoError(t, err)
		require.NoError(t, f.handler.Handle(context.Background(), res.Claims))
		evs := f.sink.Take()
		require.Len(t, evs, 1)
		require.Equal(t, event.Recovered, evs[0].Kind)
		require.EqualValues(t, 47_000, evs[0].SilentForMs, "from the last signal before the silence to the first after it")
	})
}

func TestAckStopsRepeatsButRecoveryIsReported(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "gateway", 0)
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(5*time.Second+time.Millisecond))
		ok, err := f.Store.SetAcked(context.Background(), "d1", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Empty(t, f.at(35*time.Second+time.Millisecond), "acked: the repeat is not sent")
		require.Empty(t, f.at(10*time.Minute))
		f.signal("d1", "", 11*time.Minute)
		require.Equal(t, []string{"d1 recovered 0"}, f.at(11*time.Minute+time.Millisecond))
	})
}

// TestRecoveryWaitsForTheAckBeingAnnounced: an operator acks while the device comes back. The ack's
// `acked` is published by the API after the ack is stored; the recovery, claimed meanwhile, waits for
// it, so consumers never read `acked` after the incident's `recovered`. An ack of a device that has
// signalled since is refused: its recovery is already under way.
func TestRecoveryWaitsForTheAckBeingAnnounced(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.signal("d1", "gateway", 0)
		f.signal("d2", "gateway", 0)
		require.Equal(t, []string{"d1 interrupted 0", "d2 interrupted 0"}, f.at(5*time.Second+time.Millisecond))
		ok, err := f.Store.SetAcked(ctx, "d1", time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		f.signal("d2", "", 5500*time.Millisecond)
		ok, err = f.Store.SetAcked(ctx, "d2", time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "d2 signalled since its incident opened")

		f.signal("d1", "", 6*time.Second)
		require.Equal(t, []string{"d2 recovered 0"}, f.at(6*time.Second+time.Millisecond), "d1's acked event is not out yet")
		require.Empty(t, f.at(6*time.Second+announceRecheck+2*time.Millisecond), "still not")
		require.NoError(t, f.Store.ActAnnounced(ctx, "d1"))
		require.Equal(t, []string{"d1 recovered 0"}, f.at(6*time.Second+2*announceRecheck+3*time.Millisecond))
	})
}

func TestSilenceByDeviceAndByTypeAlarmsWhenItEnds(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		_, err := f.silences.Create(ctx, silence.Silence{DeviceID: "d1", Ends: f.T0.Add(time.Minute)})
		require.NoError(t, err)
		_, err = f.silences.Create(ctx, silence.Silence{DeviceType: "gateway", Ends: f.T0.Add(2 * time.Minute), Comment: "firmware rollout"})
		require.NoError(t, err)
		f.signal("d1", "", 0)        // default, silenced by device for 1m
		f.signal("g1", "gateway", 0) // silenced by type for 2m
		f.signal("d2", "", 0)        // not silenced
		require.Equal(t, []string{"d2 interrupted 0"}, f.at(10*time.Second+time.Millisecond))
		require.Empty(t, f.at(59*time.Second))
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(time.Minute), "still silent when its silence ends")
		require.Equal(t, []string{"d2 alarm 1"}, f.at(70*time.Second+time.Millisecond))
		require.Equal(t, []string{"d1 alarm 1", "g1 interrupted 0"}, f.at(2*time.Minute), "d1 repeats a minute after its late interruption")

		list, err := f.silences.List(ctx)
		require.NoError(t, err)
		require.Empty(t, list, "both silences ended")
	})
}

func TestPerTypeTimeoutsAndIntervals(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d", "", 0)        // 10s, repeat 1m
		f.signal("g", "gateway", 0) // 5s, repeat 30s
		f.signal("s", "sensor", 0)  // 20s, no repeats
		require.Equal(t, []string{"g interrupted 0"}, f.at(5*time.Second+time.Millisecond))
		require.Equal(t, []string{"d interrupted 0"}, f.at(10*time.Second+time.Millisecond))
		require.Equal(t, []string{"s interrupted 0"}, f.at(20*time.Second+time.Millisecond))
		require.Equal(t, []string{"g alarm 1"}, f.at(35*time.Second+2*time.Millisecond))
		require.Equal(t, []string{"d alarm 1", "g alarm 2"}, f.at(70*time.Second+2*time.Millisecond))
		require.Equal(t, []string{"g alarm 3"}, f.at(95*time.Second+2*time.Millisecond), "sensor never repeats")
	})
}

func TestReloadChangesIntervalAtNextAct(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("g", "gateway", 0)
		require.Equal(t, []string{"g interrupted 0"}, f.at(5*time.Second))
		f.policies.Store(parsePolicies(t, `
types:
  default: {timeout: 10s, repeat_every: 1m, max_repeats: 2}
  gateway: {timeout: 5s, repeat_every: 2m, max_repeats: 0}
`))
		require.Empty(t, f.at(35*time.Second), "the act scheduled under the old interval finds repeat 1 not due under the new one")
		require.Empty(t, f.at(2*time.Minute+4*time.Second))
		require.Equal(t, []string{"g alarm 1"}, f.at(2*time.Minute+5*time.Second))
		require.Equal(t, []string{"g alarm 2"}, f.at(4*time.Minute+5*time.Second))
	})
}

// One wake-up's claims of one slot, one acknowledged per device (silenced) and one as committed: the
// in-flight record goes with the acknowledgement, so nothing comes back when the lease runs out.
func TestMixedBatchReleasesItsRecordWithTheAcks(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		quiet, loud := "q0", ""
		for i := 1; loud == ""; i++ {
			if d := fmt.Sprintf("l%d", i); deadline.Slot(d, f.Store.Slots()) == deadline.Slot(quiet, f.Store.Slots()) {
				loud = d
			}
		}
		_, err := f.silences.Create(ctx, silence.Silence{DeviceID: quiet, Ends: f.T0.Add(5 * time.Minute)})
		require.NoError(t, err)
		f.signal(quiet, "", 0) // default: timeout 10s, repeat 1m
		f.signal(loud, "", 0)
		require.Equal(t, []string{loud + " interrupted 0"}, f.at(10*time.Second+time.Millisecond))
		require.Empty(t, f.at(45*time.Second), "past the 30s lease: the record was released, nothing is handed out again")
		require.Equal(t, []string{loud + " alarm 1"}, f.at(70*time.Second+time.Millisecond))
	})
}

// A claim commits the interruption with the interval in force when it claimed; a reload before the loop
// handles it makes the loop acknowledge that claim itself, so the first repeat follows the new interval.
func TestReloadBetweenClaimAndPublishAcknowledgesTheNewInterval(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.signal("g", "gateway", 0)
		f.Clock.Set(f.T0.Add(5 * time.Second))
		res, err := f.Store.Claim(ctx, testenv.AllSlots(f.Store.Slots()), deadline.ClaimOptions{Now: f.Clock.Now(), Lease: 30 * time.Second, Batch: 256})
		require.NoError(t, err)
		require.Len(t, res.Claims, 1)
		require.Equal(t, 30*time.Second, res.Claims[0].CommittedRepeat)
		f.policies.Store(parsePolicies(t, `
types:
  default: {timeout: 10s, repeat_every: 1m, max_repeats: 2}
  gateway: {timeout: 5s, repeat_every: 2m, max_repeats: 0}
`))
		require.NoError(t, f.handler.Handle(ctx, res.Claims))
		require.Equal(t, []string{"g interrupted 0"}, ids(f.sink.Take()))
		d, _, err := f.Store.Device(ctx, "g")
		require.NoError(t, err)
		require.Equal(t, f.T0.Add(2*time.Minute+5*time.Second).UnixMilli(), d.NextAct.UnixMilli(), "acknowledged with the reloaded interval")
		require.Empty(t, f.at(35*time.Second), "nothing at the interval the claim committed")
		require.Equal(t, []string{"g alarm 1"}, f.at(2*time.Minute+5*time.Second))
	})
}

func TestCrashBetweenPublishAndAckRepublishesSameID(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "", 0)
		crashing := f.newHandler()
		crashing.beforeAck = func() bool { return false }
		require.Equal(t, []string{"d1 interrupted 0"}, f.stepWith(crashing, 10*time.Second+time.Millisecond))
		require.Empty(t, f.at(20*time.Second), "leased: not redelivered before the lease runs out")
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(40*time.Second+2*time.Millisecond), "a new loop publishes it again")
		require.Empty(t, f.at(50*time.Second))

		recs := f.kafka.ReadAll(t, eventsTopic, 2, 10*time.Second)
		require.Len(t, recs, 2)
		a, err := event.Decode(recs[0].Value)
		require.NoError(t, err)
		b, err := event.Decode(recs[1].Value)
		require.NoError(t, err)
		require.Equal(t, a.ID, b.ID, "consumers can drop the duplicate by id")
		require.Equal(t, []string{"d1 alarm 1"}, f.at(100*time.Second+2*time.Millisecond), "repeats timed from the republished interruption")
	})
}

func TestKafkaDownNothingAcknowledgedThenFlowsNeverParks(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.signal("d1", "", 0)
		f.signal("d2", "", 0)
		f.sink.SetDown(true)
		require.Empty(t, f.at(10*time.Second+time.Millisecond))
		d, _, err := f.Store.Device(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, 0, d.Incident.Next, "nothing recorded as sent")
		require.Equal(t, 1, d.Incident.Failures)
		require.WithinRange(t, d.NextAct, f.T0.Add(10*time.Second+501*time.Millisecond), f.T0.Add(11*time.Second+time.Millisecond),
			"retried after the backoff, jittered")
		require.Empty(t, f.at(11*time.Second+time.Millisecond))

		f.sink.SetDown(false)
		require.Equal(t, []string{"d1 interrupted 0", "d2 interrupted 0"}, f.at(13*time.Second+time.Millisecond), "flows once the broker is back")

		// Down for longer than MaxPublishAttempts (3) tries: an outage parks nothing.
		f.sink.SetDown(true)
		for at := 74 * time.Second; at < 74*time.Second+6*PublishBackoffMax; at += PublishBackoffMax {
			require.Empty(t, f.at(at))
		}
		c, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, c.Parked)
		d, _, err = f.Store.Device(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, 6, d.Incident.Failures)
		require.Equal(t, "kafka: broker unreachable", d.Incident.Reason)
		f.sink.SetDown(false)
		require.Equal(t, []string{"d1 alarm 1", "d2 alarm 1"}, f.at(74*time.Second+6*PublishBackoffMax))
	})
}

func TestReplacedIncidentReportsRecoveryThenInterruption(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "gateway", 0)
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(5*time.Second+time.Millisecond))
		// It signals and falls silent again before the loop sees the recovery.
		f.signal("d1", "", 6*time.Second)
		f.Clock.Set(f.T0.Add(11*time.Second + time.Millisecond))
		// The recovery probe made the old incident due; claim only the deadlines first, as a wake-up may.
		require.Equal(t, []string{"d1 interrupted 0", "d1 recovered 0"}, f.at(11*time.Second+time.Millisecond))
	})
}

// TestHoldBackIngestOutage: a source down for 2× the timeout raises no interruption for devices that were
// signalling before it; devices already silent before it are still reported; devices that really fell
// silent during it are reported once the grace after it has passed.
func TestHoldBackIngestOutage(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		var troubleSince atomic.Pointer[time.Time]
		troubleSince.Store(&time.Time{})
		hb := holdback.New(holdback.Options{Client: f.RDB, ReplicaID: "r1", Now: f.Clock.Now,
			Grace: func() time.Duration { return 10 * time.Second },
			Probes: []holdback.Probe{{Name: "mqtt", Trouble: func(time.Time) holdback.ProbeTrouble {
				return holdback.ProbeTrouble{Since: *troubleSince.Load(), Why: "disconnected"}
			}}}})
		require.NoError(t, hb.Start(ctx))
		step := func(d time.Duration) []string {
			f.Clock.Set(f.T0.Add(d))
			require.NoError(t, hb.Tick(ctx))
			return f.at(d, hb.Watermark(f.Clock.Now()))
		}
		f.signal("early", "", -5*time.Second) // silent before the outage: deadline t0+5s
		f.signal("busy", "", 5*time.Second)   // signals until the outage; its signals during it are lost
		f.signal("quiet", "", 6*time.Second)  // really falls silent at t0+6s
		require.Empty(t, step(4*time.Second))

		start := f.T0.Add(8 * time.Second)
		troubleSince.Store(&start)
		require.Equal(t, []string{"early interrupted 0"}, step(12*time.Second), "already silent before the outage")
		st := hb.Status()
		require.True(t, st.Active)
		require.Equal(t, start, st.Since)
		require.Contains(t, st.Reason, "mqtt: disconnected")
		require.Empty(t, step(20*time.Second))
		require.Empty(t, step(27*time.Second))

		troubleSince.Store(&time.Time{}) // back after 20s = 2× the timeout
		require.Empty(t, step(28*time.Second))
		require.Equal(t, f.T0.Add(38*time.Second), hb.Status().Until)
		f.signal("busy", "", 29*time.Second) // the backlog and fresh signals land
		require.Empty(t, step(37*time.Second), "grace")
		require.Equal(t, []string{"quiet interrupted 0"}, step(38*time.Second+time.Millisecond), "still silent after the grace")
		require.False(t, hb.Status().Active)
		require.Empty(t, step(38*time.Second+500*time.Millisecond))
	})
}

// TestHoldBackServiceWasDown: heartbeatd down for 2× the timeout, then started again: no storm, grace
// applied, still-silent devices reported after it.
func TestHoldBackServiceWasDown(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		grace := func() time.Duration { return 10 * time.Second }
		first := holdback.New(holdback.Options{Client: f.RDB, ReplicaID: "r1", Now: f.Clock.Now, Grace: grace})
		require.NoError(t, first.Start(ctx))
		require.False(t, first.Status().Active, "a first start ever is not an outage")

		f.signal("gone", "", -11*time.Second) // deadline t0-1s: silent before the stop
		f.signal("a", "", -5*time.Second)     // deadline t0+5s: its signals during the stop would have been lost
		f.signal("b", "", 2*time.Second)      // deadline t0+12s: really falls silent
		// Down from t0 to t0+20s.
		f.Clock.Set(f.T0.Add(20 * time.Second))
		hb := holdback.New(holdback.Options{Client: f.RDB, ReplicaID: "r1", Now: f.Clock.Now, Grace: grace})
		require.NoError(t, hb.Start(ctx))
		st := hb.Status()
		require.True(t, st.Active)
		require.Equal(t, f.T0, st.Since)
		require.Equal(t, f.T0.Add(30*time.Second), st.Until)
		require.Contains(t, st.Reason, "not running")

		step := func(d time.Duration) []string {
			f.Clock.Set(f.T0.Add(d))
			require.NoError(t, hb.Tick(ctx))
			return f.at(d, hb.Watermark(f.Clock.Now()))
		}
		require.Equal(t, []string{"gone interrupted 0"}, step(20*time.Second), "no storm: only the device silent before the stop")
		f.signal("a", "", 21*time.Second) // its backlog arrives

		// Another replica started meanwhile sees the same hold through Redis.
		other := holdback.New(holdback.Options{Client: f.RDB, ReplicaID: "r2", Now: f.Clock.Now, Grace: grace})
		require.Empty(t, step(25*time.Second))
		require.NoError(t, other.Start(ctx))
		require.True(t, other.Status().Active, "r1's outage holds r2 back too")
		require.Equal(t, f.T0, other.Watermark(f.Clock.Now()))

		require.Empty(t, step(29*time.Second))
		require.Equal(t, []string{"b interrupted 0"}, step(30*time.Second+time.Millisecond))

	})
}
