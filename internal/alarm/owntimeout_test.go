package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A device registered with its own timeout is interrupted at that timeout and reported as its type
// (never as the store's name for it), repeats on its type's interval, and its type's silences cover it.
func TestOwnTimeoutReportsItsType(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		_, _, err := f.Store.Register(ctx, []string{"slow-gw"}, []deadline.Registration{{Type: "gateway", TimeoutMs: 8000}}, []string{""})
		require.NoError(t, err)
		f.signal("slow-gw", "gateway", 0)
		f.signal("gw", "gateway", 0) // the type's 5s

		require.Equal(t, []string{"gw interrupted 0"}, f.at(5*time.Second+time.Millisecond))
		events := f.step(8*time.Second + time.Millisecond)
		var own *event.Event
		for i := range events {
			if events[i].DeviceID == "slow-gw" {
				own = &events[i]
			}
		}
		require.NotNil(t, own, "interrupted at its own timeout")
		require.Equal(t, []any{event.Interrupted, "gateway"}, []any{own.Kind, own.DeviceType})
		require.True(t, own.LastSeen.Equal(f.T0), "last_seen %v", own.LastSeen)
		require.True(t, own.Deadline.Equal(f.T0.Add(8*time.Second)), "deadline %v: its own timeout", own.Deadline)
		require.Equal(t, []string{"gw alarm 1"}, f.at(35*time.Second+time.Millisecond))
		require.Equal(t, []string{"slow-gw alarm 1"}, f.at(38*time.Second+time.Millisecond), "the type's 30s repeats")

		_, err = f.silences.Create(ctx, silence.Silence{DeviceType: "gateway", Ends: f.T0.Add(time.Hour)})
		require.NoError(t, err)
		require.Empty(t, f.at(68*time.Second+time.Millisecond), "its type's silence covers it")
	})
}
