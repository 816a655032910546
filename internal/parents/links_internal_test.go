package parents

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLinkCacheForgetsAfterLinkRefresh: a remembered link is written again after linkRefresh, so a link
// Redis lost comes back; a changed parent is never taken for the remembered one.
func TestLinkCacheForgetsAfterLinkRefresh(t *testing.T) {
	var c linkCache
	t0 := time.Unix(1_795_340_000, 0)
	require.False(t, c.has("s-1", "gw-1", t0))
	c.put("s-1", "gw-1", t0)
	require.True(t, c.has("s-1", "gw-1", t0.Add(time.Minute)))
	require.False(t, c.has("s-1", "gw-2", t0.Add(time.Minute)), "another parent is a new link")
	require.False(t, c.has("s-1", "gw-1", t0.Add(linkRefresh)), "written again after linkRefresh")
	c.forget("s-1")
	require.False(t, c.has("s-1", "gw-1", t0))
}
