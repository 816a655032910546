package deadline_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

func TestDecodeStateReadsFullAndClaimForms(t *testing.T) {
	full := deadline.State{Deadline: 1_763_800_031_000, TypeIndex: 2, Next: 3, Acked: true, InterruptedAt: 1_763_800_031_005, Failures: 1, Reason: "kafka: a:b"}
	got, err := deadline.DecodeState(full.Encode())
	require.NoError(t, err)
	require.Equal(t, full, got)
	for _, hold := range []deadline.Hold{deadline.HoldNone, deadline.HoldParent, deadline.HoldAfterParent} {
		held := deadline.State{Deadline: 1_763_800_031_000, Next: 1, Hold: hold, InterruptedAt: 1_763_800_031_005}
		got, err := deadline.DecodeState(held.Encode())
		require.NoError(t, err)
		require.Equal(t, held, got)
	}
	exhausted := deadline.State{Deadline: 1_763_800_031_000, Next: 4, Exhausted: true}
	got, err = deadline.DecodeState(exhausted.Encode())
	require.NoError(t, err)
	require.Equal(t, exhausted, got)
	got, err = deadline.DecodeState(fmt.Sprint(1_763_800_031_000*deadline.MaxTypes + 2))
	require.NoError(t, err)
	require.Equal(t, deadline.State{Deadline: 1_763_800_031_000, TypeIndex: 2, Next: 1, InterruptedAt: 1_763_800_031_000}, got,
		"a committed incident: interrupted sent, repeats timed from the deadline")
	for _, bad := range []string{"", "x", "-5", "1:2"} {
		_, err := deadline.DecodeState(bad)
		require.Error(t, err, "%q", bad)
	}
}
