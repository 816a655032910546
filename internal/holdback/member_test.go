package holdback

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// member is one replica of the member tests: it reads the same signals as every other through the share
// name (a split of them) as member (release 5s); taken, when set, answers its TakenOver.
type member struct {
	*Tracker
	mu    sync.Mutex
	asked []string // "member@since ms" of each TakenOver call
	taken bool
}

func newMember(t *testing.T, rdb redis.UniversalClient, clk *testenv.Clock, id, incarnation, name, shareMember string, takenOver bool) *member {
	t.Helper()
	m := &member{}
	share := Share{Name: name, Signals: "devices/+/heartbeat", Member: shareMember, Release: 5 * time.Second}
	if takenOver {
		share.TakenOver = func(who string, since time.Time) bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.asked = append(m.asked, who+"@"+since.Format(time.RFC3339Nano))
			return m.taken
		}
	}
	m.Tracker = newReplicaTracker(rdb, id, clk.Now, func(o *Options) {
		o.Incarnation, o.MemberLapse = incarnation, time.Second
		if name != "" {
			o.Shares = []Share{share}
		}
	})
	require.NoError(t, m.Start(context.Background()))
	return m
}

func (m *member) takeOver(ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.taken = ok
}

// sharingPair starts replicas r1 and r2 splitting an MQTT shared subscription as client-1 and client-2
// (answering TakenOver when takenOver) on a Redis of their own, and ticks both once.
func sharingPair(t *testing.T, takenOver bool) (redis.UniversalClient, *testenv.Clock, *member, *member) {
	t.Helper()
	rdb, clk := holdBackRedis(t)
	r1 := newMember(t, rdb, clk, "r1", "i1", "mqtt:hb", "client-1", takenOver)
	r2 := newMember(t, rdb, clk, "r2", "i2", "mqtt:hb", "client-2", takenOver)
	ticks(t, r1.Tracker, r2.Tracker)
	return rdb, clk, r1, r2
}

// memberWindow is the one window h opened itself (the others' are shown too), a member window.
func memberWindow(t *testing.T, h *Tracker) Window {
	t.Helper()
	var own []Window
	for _, w := range h.Status().Windows {
		if w.Replica == h.opts.ReplicaID {
			own = append(own, w)
		}
	}
	require.Len(t, own, 1, "%+v", own)
	require.Equal(t, causeMember, own[0].Cause)
	return own[0]
}

// TestMemberDeathHoldsUntilTheShareIsReadAgain: r1 and r2 split an MQTT shared subscription. r1 dies
// (no more ticks, no release). Until r2 can tell, r2 claims nothing later than r1's last word plus the
// lapse; from then on a window from r1's last word holds r2 (and would hold every replica) until r2 has
// taken r1's session over, then its grace.
func TestMemberDeathHoldsUntilTheShareIsReadAgain(t *testing.T) {
	_, clk, _, r2 := sharingPair(t, true)
	last := clk.Now()
	require.Equal(t, last, r2.Watermark(last), "a live member vouches for its share")

	clk.Advance(900 * time.Millisecond)
	ticks(t, r2.Tracker)
	require.False(t, r2.Status().Active, "a word 900ms old is within the lapse")
	clk.Advance(300 * time.Millisecond)
	require.Equal(t, last.Add(time.Second), r2.Watermark(clk.Now()), "before any tick tells: nothing past its word + lapse")

	ticks(t, r2.Tracker)
	w := memberWindow(t, r2.Tracker)
	require.Equal(t, []any{"member/r1/i1", "r2", last, time.Time{}}, []any{w.ID, w.Replica, w.From, w.To})
	require.Contains(t, w.Reason, "replica r1 stopped answering while reading mqtt:hb alone")
	require.Equal(t, last, r2.Watermark(clk.Now()))
	r2.mu.Lock()
	require.Equal(t, []string{"client-1@" + last.Format(time.RFC3339Nano)}, r2.asked, "asked to take over r1's member")
	r2.mu.Unlock()

	clk.Advance(time.Second)
	ticks(t, r2.Tracker)
	require.True(t, memberWindow(t, r2.Tracker).To.IsZero(), "still not taken over")
	r2.takeOver(true)
	clk.Advance(100 * time.Millisecond)
	closed := clk.Now()
	ticks(t, r2.Tracker)
	w = memberWindow(t, r2.Tracker)
	require.Equal(t, []any{closed, closed.Add(10 * time.Second)}, []any{w.To, w.until()}, "closed when taken over, then the grace")
	require.Equal(t, last, r2.Watermark(clk.Now()))

	clk.Set(closed.Add(10 * time.Second))
	ticks(t, r2.Tracker)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()), "over after the grace")
	clk.Advance(10 * time.Second) // r1's entry lapses for good and is dropped: the window is not reopened
	ticks(t, r2.Tracker)
	require.False(t, r2.Status().Active)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()))
}

// TestMemberDeathReleaseBound: without a way to take the share over, the window closes when the dead
// member's broker must have dropped it (its last word + its Release); a replica that reads no such share
// itself still honours the member's release once some live replica reads it, and holds until MaxHoldBack
// when none does.
func TestMemberDeathReleaseBound(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	r1 := newMember(t, rdb, clk, "r1", "i1", "kafka:signals", "r1/i1", false)
	r2 := newMember(t, rdb, clk, "r2", "i2", "kafka:signals", "r2/i2", false)
	r3 := newMember(t, rdb, clk, "r3", "i3", "", "", false) // reads no share
	ticks(t, r1.Tracker, r2.Tracker, r3.Tracker)
	last := clk.Now()

	clk.Advance(1500 * time.Millisecond)
	ticks(t, r2.Tracker, r3.Tracker)
	for _, h := range []*Tracker{r2.Tracker, r3.Tracker} {
		require.Equal(t, last, memberWindow(t, h).From)
	}
	clk.Set(last.Add(5*time.Second - time.Millisecond))
	ticks(t, r2.Tracker, r3.Tracker)
	require.True(t, memberWindow(t, r3.Tracker).To.IsZero())
	clk.Set(last.Add(5 * time.Second))
	ticks(t, r2.Tracker, r3.Tracker)
	for _, h := range []*Tracker{r2.Tracker, r3.Tracker} {
		require.Equal(t, last.Add(5*time.Second), memberWindow(t, h).To, "closed at the release")
	}

	// r2 dies too: nobody reads kafka:signals any more, so r3 holds until MaxHoldBack.
	clk.Advance(20 * time.Second)
	ticks(t, r2.Tracker, r3.Tracker)
	require.False(t, r3.Status().Active)
	gone := clk.Now()
	clk.Advance(1500 * time.Millisecond)
	ticks(t, r3.Tracker)
	clk.Set(gone.Add(30 * time.Second))
	ticks(t, r3.Tracker)
	require.Equal(t, gone, r3.Watermark(clk.Now()), "no live reader: held past the release")
	clk.Set(gone.Add(time.Minute + 1500*time.Millisecond))
	ticks(t, r3.Tracker)
	require.True(t, r3.degraded(), "bounded by max_hold_back like every window")
}

// TestMemberPauseIsNoDeath: a member that answers again with the same process was paused, not dead: its
// window goes at once, without a grace (its own stall window covers what it missed), and a later death
// of the same process is noticed again.
func TestMemberPauseIsNoDeath(t *testing.T) {
	_, clk, r1, r2 := sharingPair(t, false)
	paused := clk.Now()
	clk.Advance(1500 * time.Millisecond)
	ticks(t, r2.Tracker)
	require.Equal(t, paused, r2.Watermark(clk.Now()))

	ticks(t, r1.Tracker, r2.Tracker)
	require.False(t, r2.Status().Active, "answering again ends the hold")
	require.Empty(t, r2.Status().Windows)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()))

	died := clk.Now()
	clk.Advance(1500 * time.Millisecond)
	ticks(t, r2.Tracker)
	require.Equal(t, died, memberWindow(t, r2.Tracker).From, "the same process dying later is noticed")
}

// TestMemberRestart: r1 is killed and restarted between two ticks of r2 (a new process, same replica and
// MQTT client id). Both r2 and the new r1 hold from the old process's last word: what it had received
// and not stored is lost. Connecting with the same client id took its session over, so the windows
// close at once and only their grace holds. A clean stop leaves nothing to hold for.
func TestMemberRestart(t *testing.T) {
	rdb, clk, _, r2 := sharingPair(t, false)
	last := clk.Now()

	clk.Advance(300 * time.Millisecond)
	again := newMember(t, rdb, clk, "r1", "i1b", "mqtt:hb", "client-1", false)
	ticks(t, r2.Tracker)
	for _, h := range []*Tracker{again.Tracker, r2.Tracker} {
		w := memberWindow(t, h)
		require.Equal(t, []any{"member/r1/i1", last, clk.Now()}, []any{w.ID, w.From, w.To})
		require.Contains(t, w.Reason, "replica r1 restarted")
		require.Equal(t, last, h.Watermark(clk.Now()))
	}

	clk.Advance(10 * time.Second)
	ticks(t, again.Tracker, r2.Tracker)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()))
	again.release()
	clk.Advance(2 * time.Second)
	ticks(t, r2.Tracker)
	require.False(t, r2.Status().Active, "a released replica handed its share over")
}

// TestMemberOfAnotherSplit: replicas reading the same signals in splits of their own (a Kafka group each)
// each read all of them, so one's death loses nothing and holds nothing.
func TestMemberOfAnotherSplit(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	r1 := newMember(t, rdb, clk, "r1", "i1", "kafka:group-r1", "r1/i1", false)
	r2 := newMember(t, rdb, clk, "r2", "i2", "kafka:group-r2", "r2/i2", false)
	ticks(t, r1.Tracker, r2.Tracker)
	clk.Advance(1500 * time.Millisecond)
	ticks(t, r2.Tracker)
	require.False(t, r2.Status().Active)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()))
}

// TestMemberPausedTwiceIsHeldTwice: r1 pauses long enough for r2 to take it for dead and to read its share
// again, then answers again, then pauses again. The second pause holds r2 from r1's new last word like
// the first, in a window of its own: a process that came back is not remembered as the death already
// settled (which opened nothing the second time, and let r2 claim past r1's last word).
func TestMemberPausedTwiceIsHeldTwice(t *testing.T) {
	_, clk, r1, r2 := sharingPair(t, true)
	r2.takeOver(true)
	first := clk.Now()
	clk.Advance(1100 * time.Millisecond)
	ticks(t, r2.Tracker)
	w := memberWindow(t, r2.Tracker)
	require.Equal(t, first, w.From)
	require.False(t, w.To.IsZero(), "its share was read again at once")

	clk.Advance(time.Second)
	ticks(t, r1.Tracker, r2.Tracker) // r1 answers again
	second := clk.Now()
	clk.Advance(1100 * time.Millisecond)
	ticks(t, r2.Tracker)
	require.False(t, r2.Watermark(clk.Now()).After(second), "held from r1's new last word at the latest")
	var reopened bool
	for _, w := range r2.Status().Windows {
		reopened = reopened || (w.Cause == causeMember && w.From.Equal(second))
	}
	require.True(t, reopened, "a member window of its own: %+v", r2.Status().Windows)
}
