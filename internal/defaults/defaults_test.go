package defaults_test

import (
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/defaults"
)

func TestPositive(t *testing.T) {
	for _, c := range []struct{ v, want time.Duration }{{0, time.Second}, {-time.Millisecond, time.Second}, {time.Millisecond, time.Millisecond}} {
		if got := defaults.Positive(c.v, time.Second); got != c.want {
			t.Errorf("Positive(%v, 1s) = %v, want %v", c.v, got, c.want)
		}
	}
	if got := defaults.Positive(0, 8); got != 8 {
		t.Errorf("Positive(0, 8) = %d", got)
	}
}
