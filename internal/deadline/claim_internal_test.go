package deadline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// wellFormed is a claim's step replies with every kind of claim.
func wellFormed() claimStepReplies {
	return claimStepReplies{
		held: []any{int64(1), "b\n1806131230720002", []any{}, []any{}},
		fresh: []any{int64(2), "a\n1806131230720001", []any{"d", "1806131230720001", "1763800000000:1:1:0:0:1763800000005:0:"},
			[]any{"a", "1763800000000:1763799999000:reported:valve: stuck"}},
		due:  []any{int64(0), "c\n1806131230720000", []any{"e", "1763800000000:0:2:0:0:1763800000005:0:"}, []any{}},
		next: []any{int64(1_763_800_030_000), int64(-1)},
	}
}

func TestDecodeClaimReply(t *testing.T) {
	r, err := decodeClaimReply(wellFormed(), 3)
	require.NoError(t, err)
	require.Equal(t, claimReply{
		nextDeadline: 1_763_800_030_000, nextAlarm: -1, more: true,
		committed: []string{"a", "1806131230720001", "b", "1806131230720002"},
		again:     []string{"c", "1806131230720000"},
		replacing: []string{"d", "1806131230720001", "1763800000000:1:1:0:0:1763800000005:0:"},
		due:       []string{"e", "1763800000000:0:2:0:0:1763800000005:0:"},
		causes:    []string{"a", "1763800000000:1763799999000:reported:valve: stuck"},
	}, r)
	r, err = decodeClaimReply(wellFormed(), 4)
	require.NoError(t, err)
	require.False(t, r.more, "3 members taken of 4, and not a full batch of alarm entries")
	full := wellFormed()
	full.due.([]any)[0] = int64(1)
	r, err = decodeClaimReply(full, 4)
	require.NoError(t, err)
	require.True(t, r.more, "a full batch of alarm entries")

	empty, err := decodeClaimReply(claimStepReplies{fresh: []any{int64(0), "", []any{}, []any{}},
		due: []any{int64(0), "", []any{}, []any{}}, next: []any{int64(-1), int64(-1)}}, 4)
	require.NoError(t, err)
	require.Equal(t, claimReply{nextDeadline: -1, nextAlarm: -1}, empty, "an empty packed list holds no claims")
}

func TestDecodeClaimReplyRejectsMalformedReplies(t *testing.T) {
	with := func(step string, i int, v any) claimStepReplies {
		r := wellFormed()
		f := map[string]any{"held": r.held, "fresh": r.fresh, "due": r.due, "next": r.next}[step].([]any)
		f[i] = v
		return r
	}
	whole := func(set func(*claimStepReplies)) claimStepReplies {
		r := wellFormed()
		set(&r)
		return r
	}
	tests := []struct {
		name  string
		reply claimStepReplies
		err   string
	}{
		{"not an array", whole(func(r *claimStepReplies) { r.fresh = "OK" }), "deadline: claim fresh reply: field reply: want array, got string"},
		{"nil", whole(func(r *claimStepReplies) { r.due = nil }), "deadline: claim due reply: field reply: want array, got nil"},
		{"too short", whole(func(r *claimStepReplies) { r.held = r.held.([]any)[:3] }), "deadline: claim held reply: field reply: want 4 fields, got 3"},
		{"too long", whole(func(r *claimStepReplies) { r.next = append(r.next.([]any), int64(0)) }), "deadline: claim next reply: field reply: want 2 fields, got 3"},
		{"next deadline a string", with("next", 0, "1763800030000"), "deadline: claim next reply: field next deadline: want int, got string"},
		{"next alarm nil", with("next", 1, nil), "deadline: claim next reply: field next alarm: want int, got nil"},
		{"taken an array", with("fresh", 0, []any{}), "deadline: claim fresh reply: field taken: want int, got array"},
		{"full an array", with("due", 0, []any{}), "deadline: claim due reply: field full: want int, got array"},
		{"committed an int", with("fresh", 1, int64(3)), "deadline: claim fresh reply: field committed: want string, got int"},
		{"committed a device without its score", with("held", 1, "a\n1806131230720001\nb"), "deadline: claim held reply: field committed: want groups of 2, got 3 items"},
		{"again a device without its score", with("due", 1, "c"), "deadline: claim due reply: field again: want groups of 2, got 1 items"},
		{"replacing a string", with("fresh", 2, "d"), "deadline: claim fresh reply: field replacing: want array, got string"},
		{"replacing not triples", with("fresh", 2, []any{"d", "1806131230720001"}), "deadline: claim fresh reply: field replacing: want groups of 3, got 2 elements"},
		{"replacing holds an int", with("fresh", 2, []any{"d", int64(1806131230720001), "x"}), "deadline: claim fresh reply: field replacing[1]: want string, got int"},
		{"due not pairs", with("due", 2, []any{"e"}), "deadline: claim due reply: field due: want groups of 2, got 1 elements"},
		{"due holds nil", with("due", 2, []any{"e", nil}), "deadline: claim due reply: field due[1]: want string, got nil"},
		{"causes not pairs", with("fresh", 3, []any{"a"}), "deadline: claim fresh reply: field causes: want groups of 2, got 1 elements"},
		{"due causes not pairs", with("due", 3, []any{"a"}), "deadline: claim due reply: field causes: want groups of 2, got 1 elements"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeClaimReply(tt.reply, 4)
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
