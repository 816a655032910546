package deadline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// wellFormed is a claimScript reply with every kind of claim.
func wellFormed() []any {
	return []any{int64(1_763_800_030_000), int64(-1), int64(1), "a\n1806131230720001\nb\n1806131230720002", "c\n1806131230720000",
		[]any{"d", "1806131230720001", "1763800000000:1:1:0:0:1763800000005:0:"}, []any{"e", "1763800000000:0:2:0:0:1763800000005:0:"},
		[]any{"a", "1763800000000:1763799999000:reported:valve: stuck"}}
}

func TestDecodeClaimReply(t *testing.T) {
	r, err := decodeClaimReply(wellFormed())
	require.NoError(t, err)
	require.Equal(t, claimReply{
		nextDeadline: 1_763_800_030_000, nextAlarm: -1, more: true,
		committed: []string{"a", "1806131230720001", "b", "1806131230720002"},
		again:     []string{"c", "1806131230720000"},
		replacing: []string{"d", "1806131230720001", "1763800000000:1:1:0:0:1763800000005:0:"},
		due:       []string{"e", "1763800000000:0:2:0:0:1763800000005:0:"},
		causes:    []string{"a", "1763800000000:1763799999000:reported:valve: stuck"},
	}, r)

	empty, err := decodeClaimReply([]any{int64(-1), int64(-1), int64(0), "", "", []any{}, []any{}, []any{}})
	require.NoError(t, err)
	require.Equal(t, claimReply{nextDeadline: -1, nextAlarm: -1}, empty, "an empty packed list holds no claims")
}

func TestDecodeClaimReplyRejectsMalformedReplies(t *testing.T) {
	with := func(i int, v any) []any {
		r := wellFormed()
		r[i] = v
		return r
	}
	tests := []struct {
		name  string
		reply any
		err   string
	}{
		{"not an array", "OK", "deadline: claim reply: field reply: want array, got string"},
		{"nil", nil, "deadline: claim reply: field reply: want array, got nil"},
		{"too short", wellFormed()[:7], "deadline: claim reply: field reply: want 8 fields, got 7"},
		{"too long", append(wellFormed(), int64(0)), "deadline: claim reply: field reply: want 8 fields, got 9"},
		{"next deadline a string", with(0, "1763800030000"), "deadline: claim reply: field next deadline: want int, got string"},
		{"next alarm nil", with(1, nil), "deadline: claim reply: field next alarm: want int, got nil"},
		{"more an array", with(2, []any{}), "deadline: claim reply: field more: want int, got array"},
		{"committed an int", with(3, int64(3)), "deadline: claim reply: field committed: want string, got int"},
		{"committed a device without its score", with(3, "a\n1806131230720001\nb"), "deadline: claim reply: field committed: want groups of 2, got 3 items"},
		{"again a device without its score", with(4, "c"), "deadline: claim reply: field again: want groups of 2, got 1 items"},
		{"replacing a string", with(5, "d"), "deadline: claim reply: field replacing: want array, got string"},
		{"replacing not triples", with(5, []any{"d", "1806131230720001"}), "deadline: claim reply: field replacing: want groups of 3, got 2 elements"},
		{"replacing holds an int", with(5, []any{"d", int64(1806131230720001), "x"}), "deadline: claim reply: field replacing[1]: want string, got int"},
		{"due not pairs", with(6, []any{"e"}), "deadline: claim reply: field due: want groups of 2, got 1 elements"},
		{"due holds nil", with(6, []any{"e", nil}), "deadline: claim reply: field due[1]: want string, got nil"},
		{"causes not pairs", with(7, []any{"a"}), "deadline: claim reply: field causes: want groups of 2, got 1 elements"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeClaimReply(tt.reply)
			require.EqualError(t, err, tt.err)
		})
	}
}

func TestDecodeWakeReply(t *testing.T) {
	r, err := decodeWakeReply([]any{int64(3), []any{"f", "1763800000000:1763799999000:offline:"},
		"f\n1763800000000:1:1:0:2:1763800002000:0:"})
	require.NoError(t, err)
	require.Equal(t, wakeReply{moved: 3,
		causes:    []string{"f", "1763800000000:1763799999000:offline:"},
		committed: []string{"f", "1763800000000:1:1:0:2:1763800002000:0:"},
	}, r)

	_, err = decodeWakeReply([]any{int64(0), []any{}, "f"})
	require.EqualError(t, err, "deadline: wake reply: field committed: want groups of 2, got 1 items")
	_, err = decodeWakeReply([]any{int64(0), []any{}})
	require.EqualError(t, err, "deadline: wake reply: field reply: want 3 fields, got 2")
}
