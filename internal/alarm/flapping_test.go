package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFlapping: the third interruption within the window raises one `flapping` beside its
// `interrupted`; `recovered` and `interrupted` are still sent, repeats pause until the device has been
// stable (silent, here) for one window.
func TestFlapping(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.policies.Store(parsePolicies(t, `
types:
  default: {timeout: 10s, repeat_every: 1m}
  flappy:  {timeout: 2s, repeat_every: 3s, flapping: {count: 3, window: 1m}}
`))
		require.NoError(t, f.Store.Load(context.Background(), f.policies.Load().Names()...))
		f.signal("d", "flappy", 0)
		require.Equal(t, []string{"d interrupted 0"}, f.at(2*time.Second+5*time.Millisecond))
		f.signal("d", "flappy", 3*time.Second)
		require.Equal(t, []string{"d recovered 0"}, f.at(3*time.Second+5*time.Millisecond))
		require.Equal(t, []string{"d interrupted 0"}, f.at(5*time.Second+5*time.Millisecond))
		f.signal("d", "flappy", 6*time.Second)
		require.Equal(t, []string{"d recovered 0"}, f.at(6*time.Second+5*time.Millisecond))
		require.Equal(t, []string{"d flapping 0", "d interrupted 0"}, f.at(8*time.Second+5*time.Millisecond),
			"the third interruption within a minute")
		require.Empty(t, f.at(11*time.Second+10*time.Millisecond), "no repeat while flapping")
		require.Empty(t, f.at(40*time.Second))
		require.Equal(t, []string{"d alarm 1"}, f.at(68*time.Second+10*time.Millisecond), "stable for a window: repeats resume")
		require.Equal(t, []string{"d alarm 2"}, f.at(71*time.Second+20*time.Millisecond))

		f.signal("d", "flappy", 72*time.Second)
		require.Equal(t, []string{"d recovered 0"}, f.at(72*time.Second+5*time.Millisecond))
		require.Equal(t, []string{"d interrupted 0"}, f.at(74*time.Second+5*time.Millisecond), "one in the window: not flapping")
	})
}
