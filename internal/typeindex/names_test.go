package typeindex_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// TestCountProblemAtTheScoresLimit: as many types as fit in a score's index are fine, one more is told
// with both numbers (what check-config prints).
func TestCountProblemAtTheScoresLimit(t *testing.T) {
	require.Empty(t, typeindex.CountProblem(typeindex.MaxTypes))
	require.Equal(t, "1025 types: at most 1024 fit in a deadline score", typeindex.CountProblem(typeindex.MaxTypes+1))
}

// TestOwnTypeNameSplitsBack: a device's own-timeout name gives back its type and timeout; a configured
// type's name, or one whose timeout does not parse, is a type without one.
func TestOwnTypeNameSplitsBack(t *testing.T) {
	typ, own := typeindex.SplitOwnType(typeindex.OwnTypeName("meter", 90*time.Second))
	require.Equal(t, "meter", typ)
	require.Equal(t, 90*time.Second, own)
	typ, own = typeindex.SplitOwnType(typeindex.OwnTypeName("", time.Minute))
	require.Equal(t, typeindex.DefaultType, typ, "no type: the default one's")
	require.Equal(t, time.Minute, own)
	for _, name := range []string{"meter", "meter@soon", "meter@-1s"} {
		typ, own = typeindex.SplitOwnType(name)
		require.Equal(t, name, typ)
		require.Zero(t, own)
	}
}
