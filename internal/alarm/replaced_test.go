package alarm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/invariant"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// incidentLog hands every event a fixture published, in publication order, to the incident checker.
type incidentLog struct {
	t0      time.Time
	checker *invariant.Checker
	order   int64
	kinds   []string
}

func newIncidentLog(f *fixture) *incidentLog {
	return &incidentLog{t0: f.T0, checker: invariant.New(invariant.Options{})}
}

func (l *incidentLog) take(events []event.Event) {
	for _, e := range events {
		l.order++
		l.checker.Event(e, l.order)
		l.kinds = append(l.kinds, fmt.Sprintf("%s %v", e.Kind, e.Deadline.Sub(l.t0))) // kind and deadline
	}
}

// step is fixture.step, its events logged in publication order.
func (l *incidentLog) step(f *fixture, d time.Duration) {
	f.t.Helper()
	l.take(f.step(d))
}

func (l *incidentLog) requireClean(t *testing.T) {
	t.Helper()
	r := l.checker.Check()
	require.Empty(t, r.Violations, "events %v:\n%s", l.kinds, r.Details(10))
}

// A device reported interrupted signals once while Kafka is down and falls silent again past its
// timeout: when Kafka is back, the first incident's recovered goes out before the second's interrupted.
func TestReplacedIncidentRecoveredSurvivesPublishFailures(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		log := newIncidentLog(f)
		f.signal("d1", "gateway", 0)
		log.step(f, 5*time.Second+time.Millisecond)
		require.Equal(t, []string{"interrupted 5s"}, log.kinds)

		f.sink.SetDown(true)
		f.signal("d1", "", 6*time.Second) // its recovered cannot be published …
		log.step(f, 6*time.Second+time.Millisecond)
		log.step(f, 11*time.Second+time.Millisecond) // … and it is silent again past its timeout
		require.Len(t, log.kinds, 1, "Kafka is down")

		f.sink.SetDown(false)
		for at := 12 * time.Second; len(log.kinds) < 3 && at <= 12*time.Second+2*PublishBackoffMax; at += time.Second {
			log.step(f, at)
		}
		require.Equal(t, []string{"interrupted 5s", "recovered 5s", "interrupted 11s"}, log.kinds)
		log.requireClean(t)
	})
}

// The same after a crash between the claim that replaced the incident and its publication: the lease
// hands the new incident out again, and its recovered owed for the old one with it.
func TestReplacedIncidentRecoveredSurvivesACrash(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		log := newIncidentLog(f)
		f.signal("d1", "gateway", 0)
		log.step(f, 5*time.Second+time.Millisecond)
		f.signal("d1", "", 6*time.Second)
		// Claimed, then the replica dies before publishing anything.
		require.Len(t, f.claimOnly(11*time.Second+time.Millisecond), 1)
		log.step(f, 11*time.Second+30*time.Second+2*time.Millisecond) // the lease ran out
		require.Equal(t, []string{"interrupted 5s", "recovered 5s", "interrupted 11s"}, log.kinds)
		log.requireClean(t)
	})
}

// A replica publishes a committed claim's interrupted and dies before releasing its record; the device
// signals meanwhile and keeps signalling. The record's claim handed out again after its lease must still
// report the recovery: consumers may have seen the interruption (the soak found it after a Redis restart).
func TestCommittedClaimHandedOutAgainReportsRecovery(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		log := newIncidentLog(f)
		f.signal("d1", "gateway", 0)
		claims := f.claimOnly(5*time.Second + time.Millisecond)
		require.Len(t, claims, 1)
		c := claims[0]
		require.NotEmpty(t, c.Record, "committed")
		// Its interrupted reached Kafka; then the replica died, its record never released.
		log.take([]event.Event{event.New(event.Interrupted, "d1", "gateway", c.State.DeadlineTime(), f.T0, f.Clock.Now(), 0)})
		f.signal("d1", "", 6*time.Second) // back, and signalling since
		f.signal("d1", "", 35*time.Second)

		log.step(f, 5*time.Second+31*time.Second) // the record's lease ran out: handed out again
		log.step(f, 5*time.Second+32*time.Second)
		// The interruption again (a duplicate under the same id, if it had gone out), then the recovery.
		require.Equal(t, []string{"interrupted 5s", "interrupted 5s", "recovered 5s"}, log.kinds)
		log.requireClean(t)
	})
}
