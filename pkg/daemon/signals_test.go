package daemon

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
	"github.com/heartbeatd/heartbeatd/pkg/ingest"
)

// runChain runs an ingest chain writing to refresher (dead letters to deadLetters, nil: none) until the
// test ends.
func runChain(t testing.TB, refresher ingest.Refresher, deadLetters event.DeadLetterSink) *ingest.Chain {
	t.Helper()
	chain, err := ingest.NewChain(refresher, deadLetters, ingest.ChainOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- chain.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return chain
}
