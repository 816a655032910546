package alarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestOutageEventsAreCounted: heartbeatd_events_total counts outage_started and outage_ended like the
// devices' events (internal/correlate's own series, outages_open, has its tests there).
func TestOutageEventsAreCounted(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		m := NewMetrics(nil)
		corr := withCorrelation(t, f, 0, m)
		events := func(k event.Kind) float64 { return testenv.MetricValue(t, m.Events.WithLabelValues(string(k))) }
		ctx := context.Background()
		var gws []string
		for i := range 5 {
			gws = append(gws, fmt.Sprintf("gw%d", i))
			f.signal(gws[i], "gateway", 0) // timeout 5s
		}
		require.Len(t, f.at(5*time.Second+5*time.Millisecond), 6, "outage_started and its five members")
		require.NoError(t, corr.Tick(ctx))
		require.Equal(t, []float64{5, 1, 0}, []float64{events(event.Interrupted), events(event.OutageStarted), events(event.OutageEnded)})

		for _, d := range gws {
			f.signal(d, "gateway", 10*time.Second)
		}
		require.Len(t, f.at(10*time.Second+5*time.Millisecond), 5, "recovered")
		f.Clock.Set(f.T0.Add(12 * time.Second))
		require.NoError(t, corr.Tick(ctx)) // ends it
		require.NoError(t, corr.Tick(ctx))
		require.Len(t, f.sink.Take(), 1, "outage_ended")
		require.Equal(t, []float64{1, 1, 5}, []float64{events(event.OutageStarted), events(event.OutageEnded), events(event.Recovered)})
	})
}
