package statuspage

import (
	"testing"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain removes the heartbeatd binary the tests built once they all ended.
func TestMain(m *testing.M) { testenv.MainWithBinary(m) }
