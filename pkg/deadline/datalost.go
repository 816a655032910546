package deadline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"
)

// A Redis that lost heartbeatd's data (a restart without persistence, a failover to a replica that had
// not caught up, a flush) comes back empty, and nothing on the signal path would notice: signals simply
// write new deadlines. Each store notices it at its next layout read (every ownership heartbeat), because
// the re-created layout carries a new epoch. Then what the store remembers having written is wrong:
//   - parent links it remembers are written again by each child's next signal, not 10 minutes later, so
//     a gateway that falls silent after the loss is still one event and not a storm of its children;
//   - the type names it knows go back into the registry under the indexes the scores already use, so a
//     replica that starts after the loss gives no name another index.
//
// The types it remembers per device stay: an untyped signal keeps its device's type, and its write
// records the type in Redis again. The silences go back too (alarm.Silences). What Redis alone held
// (devices silent since before the loss, open incidents, registrations, parked events) is gone; DataLost
// lets the daemon say so.

// dataLoss counts the losses a store noticed.
type dataLoss struct {
	count atomic.Int64
	last  atomic.Int64 // unix ms of the last one noticed
	// typesOwed is set while the type registry has not been written back since the last loss.
	typesOwed atomic.Bool
}

// DataLost returns how many times this store found Redis without the data it had written, and when it
// last did (zero time: never).
func (s *Store) DataLost() (int64, time.Time) {
	n := s.lost.count.Load()
	if n == 0 {
		return 0, time.Time{}
	}
	return n, time.UnixMilli(s.lost.last.Load())
}

// CheckDataLost reads the layout again and returns DataLost's count: for a caller that found less in
// Redis than it knew, to tell a deletion from a loss the heartbeat has not noticed yet.
func (s *Store) CheckDataLost(ctx context.Context) (int64, error) {
	if _, err := s.RefreshLayout(ctx); err != nil {
		return 0, err
	}
	n, _ := s.DataLost()
	return n, nil
}

// dataLost forgets what the store remembers having written and owes the type registry its names.
func (s *Store) dataLost() {
	s.lost.last.Store(s.now().UnixMilli())
	s.lost.count.Add(1)
	s.links.forgetAll()
	s.lost.typesOwed.Store(true)
}

// payTypes writes the type registry back while it is owed, at each layout read until it succeeds: a
// registration before it would give a lost name a new index, where the scores carry the old one.
func (s *Store) payTypes(ctx context.Context) error {
	if !s.lost.typesOwed.Load() {
		return nil
	}
	if err := s.types.restore(ctx); err != nil {
		return err
	}
	s.lost.typesOwed.Store(false)
	return nil
}

// newEpoch draws the epoch a new layout is written with.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b[:])
}
