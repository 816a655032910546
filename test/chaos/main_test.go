package chaos

import (
	"os"
	"testing"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain removes the heartbeatd binaries the tests built once they all ended.
func TestMain(m *testing.M) {
	code := m.Run()
	removeSkewedBuild()
	testenv.RemoveHeartbeatdBuild()
	os.Exit(code)
}
