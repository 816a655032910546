package history

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/client"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is a history store on an empty Redis, on a clock the test moves, recording through a sink
// that takes every event unless told to refuse them.
type fixture struct {
	t      *testing.T
	rdb    redis.UniversalClient
	clock  *testenv.Clock
	store  *Store
	sink   event.Sink
	kafka  *kafkaStub
	t0     time.Time
	labels map[string]map[string]string
}

// kafkaStub stands for the Kafka publisher: it takes every event unless down.
type kafkaStub struct {
	testenv.EventLog
	down bool
}

func (k *kafkaStub) Publish(_ context.Context, events []event.Event) []error {
	errs := make([]error, len(events))
	for i, e := range events {
		if k.down {
			errs[i] = errors.New("kafka down")
			continue
		}
		k.Append(e)
	}
	return errs
}

func eachFixture(t *testing.T, h config.History, test func(t *testing.T, f *fixture)) {
	t.Helper()
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		// Today's midnight UTC, so the day figures' days are plain to read. Not a fixed date: the keys
		// expire at times of this clock, and Redis compares them with its own.
		f := &fixture{t: t, rdb: rdb, t0: time.Now().UTC().Truncate(24 * time.Hour), kafka: &kafkaStub{},
			labels: map[string]map[string]string{}}
		f.clock = testenv.NewClock(f.t0)
		if h.MaxIncidents == 0 {
			h.MaxIncidents = config.DefaultHistoryMaxIncidents
		}
		if h.Retention == 0 {
			h.Retention = config.DefaultHistoryRetention
		}
		f.store = New(Options{Client: rdb, History: h, Now: f.clock.Now, Logger: zaptest.NewLogger(t),
			Labels: func(_ context.Context, devices []string) ([]map[string]string, error) {
				out := make([]map[string]string, len(devices))
				for i, d := range devices {
					out[i] = f.labels[d]
				}
				return out, nil
			}})
		f.sink = Recording(f.kafka, f.store)
		test(t, f)
	})
}

// at is t0 + d.
func (f *fixture) at(d time.Duration) time.Time { return f.t0.Add(d) }

// publish sends events through the recording sink, at the fixture's now, and requires them taken.
func (f *fixture) publish(events ...event.Event) {
	f.t.Helper()
	for i, err := range f.sink.Publish(context.Background(), events) {
		require.NoError(f.t, err, "event %d", i)
	}
}

// ev is an event as the alarm loop builds it: deadline dl, last signal dl − 30s, raised at the clock's now.
func (f *fixture) ev(kind event.Kind, device string, dl time.Time, repeat int) event.Event {
	return event.New(kind, device, "meter", dl, dl.Add(-30*time.Second), f.clock.Now(), repeat)
}

// recovered is the recovered event of an incident of deadline dl whose device signalled again at back.
func (f *fixture) recovered(device string, dl, back time.Time) event.Event {
	e := f.ev(event.Recovered, device, dl, 0)
	e.SilentForMs = back.Sub(e.LastSeen).Milliseconds()
	return e
}

func (f *fixture) list(device string) []client.Incident {
	f.t.Helper()
	out, _, err := f.store.Incidents(context.Background(), device, MaxListLimit, "")
	require.NoError(f.t, err)
	return out
}

func ptr[T any](v T) *T { return &v }

func TestAnIncidentOpenedAckedAndRecoveredIsListedWithItsFields(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		dl := f.at(time.Hour)
		f.clock.Set(dl.Add(20 * time.Millisecond))
		opening := f.ev(event.Interrupted, "m-1", dl, 0)
		opening.OutageID = "outage:device_type:meter/1795300000000"
		f.publish(opening)

		open := f.list("m-1")
		require.Len(t, open, 1)
		assert.Nil(t, open[0].Closed, "open while it lasts")
		f.clock.Set(dl.Add(10 * time.Minute))
		got, _, err := f.store.Incidents(context.Background(), "m-1", 10, "")
		require.NoError(t, err)
		assert.Equal(t, int64(10*60*1000), got[0].DownMs, "an open incident is down until now")

		f.clock.Set(dl.Add(5 * time.Minute))
		f.publish(f.ev(event.Alarm, "m-1", dl, 1))
		f.clock.Set(dl.Add(6 * time.Minute))
		ack := f.ev(event.Acked, "m-1", dl, 0)
		ack.By = "alice"
		f.publish(ack)
		f.clock.Set(dl.Add(10 * time.Minute))
		f.publish(f.ev(event.Alarm, "m-1", dl, 2), f.ev(event.Exhausted, "m-1", dl, 2))
		back := dl.Add(40 * time.Minute)
		f.clock.Set(back.Add(50 * time.Millisecond))
		f.publish(f.recovered("m-1", dl, back))

		want := client.Incident{ID: "m-1/" + strconv.FormatInt(dl.UnixMilli(), 10) + "/interrupted/0", Opened: dl, Closed: ptr(back),
			DownMs: 40 * 60 * 1000, FirstKind: "interrupted", Repeats: 2, Exhausted: true,
			Acked: &client.IncidentAck{By: "alice", At: dl.Add(6 * time.Minute)}, OutageID: opening.OutageID}
		require.Equal(t, []client.Incident{want}, f.list("m-1"))

		// Everything published again (a replica that crashed before its acknowledgement) changes nothing.
		f.clock.Advance(time.Hour)
		f.publish(f.kafka.All()...)
		require.Equal(t, []client.Incident{want}, f.list("m-1"))
	})
}

func TestAWarningIsNoDowntimeAndACauseIsKept(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		warn := f.at(time.Hour)
		f.clock.Set(warn)
		f.publish(f.ev(event.Late, "w-1", warn, 0))
		f.clock.Set(warn.Add(time.Minute))
		f.publish(f.recovered("w-1", warn, warn.Add(time.Minute)))

		interrupted := warn.Add(2 * time.Hour)
		f.clock.Set(interrupted.Add(-20 * time.Second))
		f.publish(f.ev(event.Late, "w-1", interrupted.Add(-20*time.Second), 0))
		f.clock.Set(interrupted)
		f.publish(f.ev(event.Interrupted, "w-1", interrupted, 0))
		f.clock.Set(interrupted.Add(3 * time.Minute))
		f.publish(f.recovered("w-1", interrupted, interrupted.Add(3*time.Minute)))

		reported := interrupted.Add(time.Hour)
		f.clock.Set(reported)
		fail := f.ev(event.Interrupted, "w-1", reported, 0)
		fail.Cause, fail.Reason = event.CauseReported, "pressure sensor stuck"
		f.publish(fail)

		got := f.list("w-1")
		require.Len(t, got, 3)
		assert.Equal(t, []string{"interrupted", "late", "late"}, []string{got[0].FirstKind, got[1].FirstKind, got[2].FirstKind})
		assert.Equal(t, int64(0), got[2].DownMs, "only late: no downtime")
		assert.Equal(t, int64(3*60*1000), got[1].DownMs, "down from its interruption, not its warning")
		assert.Equal(t, "w-1/"+strconv.FormatInt(interrupted.Add(-20*time.Second).UnixMilli(), 10)+"/late/0", got[1].ID, "named by its opening event")
		assert.Equal(t, event.CauseReported, got[0].Cause)
		assert.Equal(t, "pressure sensor stuck", got[0].Reason)
	})
}

func TestASuppressedIncidentKeepsItsParent(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		dl := f.at(time.Hour)
		f.clock.Set(dl)
		s := f.ev(event.Suppressed, "child", dl, 0)
		s.Parent = "gw-1"
		f.publish(s)
		own := dl.Add(10 * time.Minute)
		f.clock.Set(own)
		f.publish(f.ev(event.Interrupted, "child", own, 0))
		got := f.list("child")
		require.Len(t, got, 1)
		assert.Equal(t, "suppressed", got[0].FirstKind)
		assert.Equal(t, "gw-1", got[0].Parent)
		assert.Equal(t, int64(10*60*1000), got[0].DownMs, "down from the suppression: it was silent all along")
	})
}

func TestADeletedDeviceLeavesNothing(t *testing.T) {
	eachFixture(t, config.History{GroupLabels: []string{"site"}}, func(t *testing.T, f *fixture) {
		f.labels["d-1"] = map[string]string{"site": "north"}
		dl := f.at(time.Hour)
		f.clock.Set(dl)
		f.publish(f.ev(event.Interrupted, "d-1", dl, 0))
		f.clock.Set(dl.Add(time.Minute))
		f.publish(f.recovered("d-1", dl, dl.Add(time.Minute)))
		f.clock.Set(dl.Add(2 * time.Hour))
		f.publish(f.ev(event.Interrupted, "d-1", dl.Add(2*time.Hour), 0))
		f.publish(f.ev(event.Interrupted, "forgotten", dl.Add(2*time.Hour), 0))
		require.NotEmpty(t, testenv.KeysLike(testenv.Keyspace(t, f.rdb), "hb:"))
		// retention.forget_after publishes no deleted event: its devices are forgotten here too.
		require.NoError(t, f.store.Forget(context.Background(), []string{"forgotten"}))
		assert.Empty(t, f.list("forgotten"))

		f.clock.Advance(time.Minute)
		del := event.New(event.Deleted, "d-1", "meter", dl.Add(2*time.Hour), time.Time{}, f.clock.Now(), 0)
		del.ID = event.ID("d-1", f.clock.Now(), event.Deleted, 0)
		f.publish(del)
		assert.Empty(t, f.list("d-1"))
		assert.Empty(t, testenv.KeysLike(testenv.Keyspace(t, f.rdb), "hb:"), "its incidents and day figures are gone")
	})
}

func TestNothingIsStoredForADeviceWithoutIncidents(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		f.clock.Set(f.at(time.Hour))
		silenced := f.ev(event.Silenced, "quiet", f.at(time.Hour), 0)
		flapping := f.ev(event.Flapping, "quiet", f.at(time.Hour), 0)
		outage := event.New(event.OutageStarted, "outage:device_type:meter", "", f.at(time.Hour), time.Time{}, f.clock.Now(), 0)
		f.publish(silenced, flapping, outage)
		assert.Empty(t, testenv.KeysLike(testenv.Keyspace(t, f.rdb), "hb:"))
		s, err := f.store.Device(context.Background(), "quiet")
		require.NoError(t, err)
		assert.Equal(t, Summary{Availability: map[string]float64{"24h": 1, "7d": 1, "30d": 1}}, s)
	})
}

func TestAnEventKafkaDidNotTakeIsNotRecorded(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		f.kafka.down = true
		dl := f.at(time.Hour)
		errs := f.sink.Publish(context.Background(), []event.Event{f.ev(event.Interrupted, "k-1", dl, 0)})
		require.Error(t, errs[0])
		assert.Empty(t, f.list("k-1"))
	})
}

func TestARecordThatFailsIsReportedSoTheEventIsPublishedAgain(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // Redis cannot be asked: the history is not written
		errs := f.sink.Publish(ctx, []event.Event{f.ev(event.Interrupted, "r-1", f.at(time.Hour), 0)})
		require.Error(t, errs[0], "taken by Kafka but not recorded: reported failed, so it is published again")
		f.publish(f.kafka.All()...)
		assert.Len(t, f.list("r-1"), 1)
	})
}

// Two replicas record one device's events, each remembering what it last wrote: the one whose memory is
// stale finds out by its write's compare, reads Redis and folds again, so nothing is lost or counted twice.
func TestReplicasRecordingOneDeviceAgree(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		other := New(Options{Client: f.rdb, Now: f.clock.Now, Logger: zaptest.NewLogger(t)})
		ctx := context.Background()
		dl := f.at(time.Hour)
		f.clock.Set(dl)
		require.NoError(t, f.store.Record(ctx, []event.Event{f.ev(event.Interrupted, "shared", dl, 0)}))
		f.clock.Set(dl.Add(time.Minute))
		ack := f.ev(event.Acked, "shared", dl, 0)
		ack.By = "bob"
		require.NoError(t, other.Record(ctx, []event.Event{ack}))
		f.clock.Set(dl.Add(2 * time.Minute))
		require.NoError(t, f.store.Record(ctx, []event.Event{f.recovered("shared", dl, dl.Add(2*time.Minute))}))
		require.NoError(t, other.Record(ctx, []event.Event{f.ev(event.Alarm, "shared", dl, 1)})) // late, after the close

		got := f.list("shared")
		require.Len(t, got, 1)
		assert.Equal(t, "bob", got[0].Acked.By)
		assert.NotNil(t, got[0].Closed)
		assert.Equal(t, 0, got[0].Repeats, "a repeat after the close is no part of it")
		groups, err := other.Groups(ctx, GroupQuery{Window: 24 * time.Hour})
		require.NoError(t, err)
		require.Len(t, groups, 1)
		assert.Equal(t, (2 * time.Minute).Milliseconds(), groups[0].DownMs)
		assert.Equal(t, int64(1), groups[0].Incidents)
	})
}
