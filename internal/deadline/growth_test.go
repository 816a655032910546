package deadline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/flaps"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// What a device can make Redis hold is bounded (docs/concepts.md, "Slot layout"): these tests drive one
// key family each to where it used to grow for good.

// links is what Redis holds of the parent links: each children set's members by parent, and the parents
// in the named-parents sets.
func links(t *testing.T, f fixture) (children map[string][]string, named []string) {
	t.Helper()
	ctx := context.Background()
	children = map[string][]string{}
	prefix := strings.TrimSuffix(f.Store.Keys().Children(""), "{}")
	namedPrefix := strings.TrimSuffix(f.Store.Keys().NamedParents(""), "{0}")
	for key, k := range testenv.Keyspace(t, f.RDB) {
		switch {
		case strings.HasPrefix(key, prefix):
			members, err := f.RDB.SMembers(ctx, key).Result()
			require.NoError(t, err)
			children[strings.TrimSuffix(strings.TrimPrefix(key, prefix+"{"), "}")] = members
		case strings.HasPrefix(key, namedPrefix):
			require.Equal(t, "set", k.Type, key)
			members, err := f.RDB.SMembers(ctx, key).Result()
			require.NoError(t, err)
			named = append(named, members...)
		}
	}
	return children, named
}

// TestALinkChangeLeavesTheFormerParent: a device belongs to one parent at a time, whichever way its link
// changes (a signal, another replica's signal, SetParent, a registration), and a parent nobody names any
// more is not named; a deleted device leaves its parent.
func TestALinkChangeLeavesTheFormerParent(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		other := fixtureStore(t, f.RDB, 4, f.Clock.Now, nil) // another replica
		sig := func(s *deadline.Store, parent string) {
			t.Helper()
			require.NoError(t, s.Refresh(ctx, []deadline.Signal{{Device: "c", Type: "sensor", Parent: parent, Seen: f.Clock.Now()}}))
		}
		expect := func(parent string, why string) {
			t.Helper()
			children, named := links(t, f)
			if parent == "" {
				require.Empty(t, children, why)
				require.Empty(t, named, why)
				return
			}
			require.Equal(t, map[string][]string{parent: {"c"}}, children, why)
			require.Equal(t, []string{parent}, named, why)
			got, err := f.Store.Links().ParentsOf(ctx, []string{"c"})
			require.NoError(t, err)
			require.Equal(t, []string{parent}, got, why)
		}
		sig(f.Store, "A")
		expect("A", "linked")
		sig(f.Store, "B")
		expect("B", "a signal naming another parent")
		sig(other, "C")
		expect("C", "another replica's signal: the link swap tells it the parent it replaced")
		sig(f.Store, "G")
		expect("G", "this replica remembered writing B, yet the swap takes c out of C, the parent it replaced")
		require.NoError(t, f.Store.Links().SetParent(ctx, "c", "D"))
		expect("D", "SetParent")
		_, _, err := f.Store.Register(ctx, []string{"c"}, []deadline.Registration{{Type: "sensor"}}, []string{"E"})
		require.NoError(t, err)
		expect("E", "a registered parent")
		require.NoError(t, f.Store.Links().SetParent(ctx, "c", ""))
		expect("", "SetParent to none")
		sig(f.Store, "F")
		expect("F", "linked again")
		found, err := f.Store.Delete(ctx, "c")
		require.NoError(t, err)
		require.True(t, found)
		expect("", "deleted")
	})
}

// TestOneDeviceNamingManyParentsHoldsOneLink: a device naming a new parent in every message, one message
// per batch or many in one, holds one link, one children set and one named parent, and none once
// deleted (it used to leave a set and a named entry per parent: 400 parents, 471 keys).
func TestOneDeviceNamingManyParentsHoldsOneLink(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		before := testenv.Keyspace(t, f.RDB)
		for i := range 400 {
			f.Refresh(t, deadline.Signal{Device: "roamer", Type: "sensor", Parent: fmt.Sprint("gw-", i), Seen: f.Clock.Now()})
		}
		var batch []deadline.Signal
		for i := range 100 {
			batch = append(batch, deadline.Signal{Device: "roamer", Type: "sensor", Parent: fmt.Sprint("cell-", i), Seen: f.Clock.Now()})
		}
		f.Refresh(t, batch...)
		children, named := links(t, f)
		require.Equal(t, map[string][]string{"cell-99": {"roamer"}}, children, "the batch's last parent")
		require.Equal(t, []string{"cell-99"}, named)
		after := testenv.Keyspace(t, f.RDB)
		require.LessOrEqual(t, len(after)-len(before), 8, "new keys: %v", newKeys(before, after))

		found, err := f.Store.Delete(ctx, "roamer")
		require.NoError(t, err)
		require.True(t, found)
		children, named = links(t, f)
		require.Empty(t, children)
		require.Empty(t, named)
	})
}

// newKeys lists the keys of after that before lacks.
func newKeys(before, after map[string]testenv.Key) []string {
	var out []string
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// TestADeletedParentStaysNamedWhileItsChildrenNameIt: deleting a gateway leaves its children's links (they
// still name it, and it may come back); once its last child goes, nothing of it is left.
func TestADeletedParentStaysNamedWhileItsChildrenNameIt(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: f.Clock.Now()},
			deadline.Signal{Device: "s1", Type: "sensor", Parent: "gw", Seen: f.Clock.Now()},
			deadline.Signal{Device: "s2", Type: "sensor", Parent: "gw", Seen: f.Clock.Now()})
		_, err := f.Store.DeleteMany(ctx, []string{"gw", "s1"})
		require.NoError(t, err)
		children, named := links(t, f)
		require.Equal(t, map[string][]string{"gw": {"s2"}}, children)
		require.Equal(t, []string{"gw"}, named)
		_, err = f.Store.Delete(ctx, "s2")
		require.NoError(t, err)
		children, named = links(t, f)
		require.Empty(t, children)
		require.Empty(t, named)
	})
}

// TestDeleteDropsTheFlapHistory: a deleted device's interruption history goes with it.
func TestDeleteDropsTheFlapHistory(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "flappy")
		require.NoError(t, f.Store.Flaps().Record(ctx, []flaps.Update{{Device: "flappy", Slot: c.Slot,
			Times: []int64{f.Clock.Now().Add(-time.Minute).UnixMilli(), f.Clock.Now().UnixMilli()}}}))
		history := func() []int64 {
			t.Helper()
			got, err := f.Store.Flaps().History(ctx, []flaps.Device{{ID: "flappy", Slot: c.Slot}}, []bool{true})
			require.NoError(t, err)
			return got[0]
		}
		require.Len(t, history(), 2)
		found, err := f.Store.Delete(ctx, "flappy")
		require.NoError(t, err)
		require.True(t, found)
		require.Empty(t, history(), "its history went with it")
	})
}
