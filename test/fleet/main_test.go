// Package fleet runs real heartbeatd processes on real redis-server and an in-process Kafka and checks
// the fleet awareness of docs/concepts.md from the outside: a gateway going dark is one `interrupted` and one
// `suppressed` per child, not a page per child and repeat; a correlated outage is one `outage_started`.
// Each scenario runs two replicas and SIGKILLs one mid-outage, and prints one accounting line.
package fleet

import (
	"testing"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain removes the heartbeatd binary the tests built once they all ended.
func TestMain(m *testing.M) { testenv.MainWithBinary(m) }
