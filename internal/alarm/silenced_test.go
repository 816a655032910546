package alarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// withActs gives the fixture's handler a silence store that publishes its acts through the recorder
// and re-arms what it deferred, as the daemon wires it.
func (f *fixture) withActs() *silence.Silences {
	f.t.Helper()
	acts := NewActs(ActsOptions{Sink: f.sink, Logger: zaptest.NewLogger(f.t)})
	f.silences = silence.New(f.RDB, silence.Options{Store: f.Store, Events: acts, Now: f.Clock.Now, Logger: zaptest.NewLogger(f.t)})
	f.handler = f.newHandler()
	return f.silences
}

// The handler defers what a silence covers, and a silence ended early hands exactly that back: a type
// silence its type's incidents, a device silence its device, each two index refreshes after the end.
// Incidents another silence defers to the very same instant stay deferred. (internal/silence and
// internal/deadline test the re-arm on its own.)
func TestEndingASilenceEarlyRearmsWhatItDeferred(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sil := f.withActs()
		ends := f.T0.Add(time.Hour)
		gateways, err := sil.Create(ctx, silence.Silence{DeviceType: "gateway", Ends: ends})
		require.NoError(t, err)
		_, err = sil.Create(ctx, silence.Silence{DeviceID: "d1", Ends: ends}) // the same end, another type
		require.NoError(t, err)
		d2, err := sil.Create(ctx, silence.Silence{DeviceID: "d2", Ends: f.T0.Add(2 * time.Hour)})
		require.NoError(t, err)
		var want []string
		for i := range 10 {
			id := fmt.Sprintf("g-%04d", i)
			f.signal(id, "gateway", 0)
			want = append(want, id+" interrupted 0")
		}
		f.signal("d1", "", 0)
		f.signal("d2", "", 0)
		f.sink.Take() // the silenced events
		require.Empty(t, f.at(11*time.Second), "every device is silenced")

		f.Clock.Set(f.T0.Add(20 * time.Second))
		ok, err := sil.End(ctx, gateways.ID, event.Act{By: "alice"})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []string{"gateway unsilenced 0"}, ids(f.sink.Take()))
		require.Empty(t, f.at(21*time.Second), "re-armed two refreshes after the end, when every replica dropped the silence")
		require.Equal(t, want, f.at(22*time.Second), "every gateway alarms; d1, silenced to the same instant, does not")

		ok, err = sil.End(ctx, d2.ID, event.Act{})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []string{"d2 unsilenced 0"}, ids(f.sink.Take()))
		require.Equal(t, []string{"d2 interrupted 0"}, f.at(24*time.Second))
		require.Contains(t, f.at(time.Hour), "d1 interrupted 0", "d1 at its own silence's end")
	})
}
