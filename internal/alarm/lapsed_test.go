package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
)

// A replica that claims a repeat and stalls past its lease (SIGSTOP, a long GC, a slow Redis) must not
// publish it when it resumes: the other replica claimed the incident meanwhile, saw the device back and
// said `recovered`, and a repeat after that would reopen nothing but break the incident's order.
func TestReplicaStalledPastItsLeasePublishesNothing(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		const lease = 2 * time.Second
		handler := func() *Handler {
			return NewHandler(HandlerOptions{Store: f.Store, Sink: f.sink, Policies: f.policies.Load, Silences: f.silences, Lease: lease,
				MaxPublishAttempts: 3, Refused: eventkafka.Refused, Now: f.Clock.Now, Logger: zaptest.NewLogger(t)})
		}
		stalled, other := handler(), handler()
		claim := func(at time.Duration) []deadline.Claim {
			f.Clock.Set(f.T0.Add(at))
			return f.ClaimAll(t, deadline.ClaimOptions{Lease: lease}).Claims
		}
		// The default type: timeout 10s, repeat_every 1m.
		f.signal("d", "", 0)
		require.NoError(t, other.Handle(context.Background(), claim(10*time.Second+5*time.Millisecond)))
		require.Equal(t, []string{"d interrupted 0"}, ids(f.sink.Take()))

		repeat := claim(70*time.Second + 5*time.Millisecond) // the stalled replica's claim of the first repeat
		require.Len(t, repeat, 1)
		f.signal("d", "", 71*time.Second)
		require.NoError(t, other.Handle(context.Background(), claim(72*time.Second+10*time.Millisecond)),
			"the lease ran out: the other replica claims the incident again")
		require.Equal(t, []string{"d recovered 0"}, ids(f.sink.Take()))

		require.NoError(t, stalled.Handle(context.Background(), repeat), "the stalled replica resumes")
		require.Empty(t, f.sink.Take(), "no repeat after the recovery")

		// A claim handled within its lease publishes as always.
		f.Clock.Set(f.T0.Add(80 * time.Second))
		require.Empty(t, claim(80*time.Second))
		f.signal("d", "", 80*time.Second)
		fresh := claim(90*time.Second + 5*time.Millisecond)
		f.Clock.Set(f.T0.Add(91 * time.Second)) // half the lease gone
		require.NoError(t, stalled.Handle(context.Background(), fresh))
		require.Equal(t, []string{"d interrupted 0"}, ids(f.sink.Take()))
	})
}
