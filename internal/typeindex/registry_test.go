package typeindex_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestLookupTellsAnUnreadableRegistryFromAnUnknownIndex: a replica meets an index another replica
// registered. When the registry cannot be read, Lookup says so instead of answering the default type,
// which a claim would time by the wrong policy; FullName, for display, still answers the default.
func TestLookupTellsAnUnreadableRegistryFromAnUnknownIndex(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	writer := typeindex.New(srv.Client(t), "hb:types")
	idx, _, err := writer.Current(ctx, "meter", 90*time.Second)
	require.NoError(t, err)
	require.NotZero(t, idx)

	reader := typeindex.New(srv.Client(t), "hb:types")
	name, err := reader.LookupName(ctx, idx)
	require.NoError(t, err)
	require.Equal(t, "meter", name, "read from Redis: another replica registered it")

	cut := redis.NewClient(&redis.Options{Addr: srv.Addr})
	require.NoError(t, cut.Close())
	unreadable := typeindex.New(cut, "hb:types")
	_, err = unreadable.LookupName(ctx, idx)
	require.Error(t, err, "the registry cannot be read")
	require.Equal(t, typeindex.DefaultType, unreadable.Name(ctx, idx), "for display only")

	name, err = reader.LookupName(ctx, 1000)
	require.NoError(t, err)
	require.Equal(t, typeindex.DefaultType, name, "an index nobody registered")
}
