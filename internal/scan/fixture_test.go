package scan_test

import (
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is the shared one (deadlinetest.Fixture): an empty Redis and a store of the default type.
type fixture = *deadlinetest.Fixture

// eachFixture runs test once per Redis backend, each time on an empty Redis with a store of slots slots.
func eachFixture(t *testing.T, slots int, test func(t *testing.T, f fixture)) {
	t.Helper()
	deadlinetest.Each(t, deadline.Options{Slots: slots, Timeout: func(string) time.Duration { return time.Minute }},
		[]string{deadline.DefaultType}, test)
}
