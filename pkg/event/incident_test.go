package event

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Transitions is the table Next follows, row for row, and Next refuses every pair it does not list.
func TestTransitionsAreTheRowsNextAccepts(t *testing.T) {
	rows := map[[2]string]Phase{}
	for _, tr := range Transitions() {
		got, err := tr.From.Next(tr.Kind)
		require.NoError(t, err, tr.String())
		require.Equal(t, tr.To, got, tr.String())
		rows[[2]string{tr.From.String(), string(tr.Kind)}] = tr.To
	}
	kinds := []Kind{Interrupted, Late, Alarm, Recovered, Exhausted, Watchdog, Suppressed, OutageStarted, OutageEnded,
		Flapping, Acked, Silenced, Unsilenced, Deleted}
	for _, from := range []Phase{Closed, Warned, SuppressedPhase, Open} {
		for _, k := range kinds {
			if _, listed := rows[[2]string{from.String(), string(k)}]; listed {
				continue
			}
			got, err := from.Next(k)
			require.Error(t, err, "%s × %s is no row, yet Next accepts it", from, k)
			require.Equal(t, from, got, "a refused event leaves the phase as it was")
		}
	}
	require.False(t, DeviceKind(OutageStarted))
	require.True(t, DeviceKind(Flapping))
}
