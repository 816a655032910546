package ingest

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// MaxLoggedTypes is how many unknown type names are logged one by one (each once), so a fleet inventing
// names cannot grow memory; past it the signals naming other unknown names are summarised in one line
// at most every unknownSummaryEvery. heartbeatd_signals_unknown_type_total counts them all.
const MaxLoggedTypes = 1024

const unknownSummaryEvery = time.Minute

// unknownTypes remembers the unknown type names already logged.
type unknownTypes struct {
	log *zap.Logger

	mu       sync.Mutex
	logged   map[string]struct{}
	unlogged int64     // signals since the summary window began whose name was not logged
	window   time.Time // when it began
}

func newUnknownTypes(log *zap.Logger) *unknownTypes {
	return &unknownTypes{log: log, logged: map[string]struct{}{}}
}

// note logs an unknown type name the first time it is seen, while the set has room.
func (u *unknownTypes) note(name, device string, now time.Time) {
	u.mu.Lock()
	if _, seen := u.logged[name]; seen {
		u.mu.Unlock()
		return
	}
	if len(u.logged) < MaxLoggedTypes {
		u.logged[name] = struct{}{}
		full := len(u.logged) == MaxLoggedTypes
		u.mu.Unlock()
		u.log.Warn("unknown device type; the default policy applies", zap.String("type", name), zap.String("device", device))
		if full {
			u.log.Warn("unknown device types: the names logged reached the limit; further names are summarised",
				zap.Int("names", MaxLoggedTypes), zap.Duration("every", unknownSummaryEvery))
		}
		return
	}
	if u.unlogged == 0 {
		u.window = now
	}
	u.unlogged++
	var signals int64
	window := u.window
	if now.Sub(window) >= unknownSummaryEvery {
		signals, u.unlogged = u.unlogged, 0
	}
	u.mu.Unlock()
	if signals > 0 {
		u.log.Warn("signals named unknown device types not logged one by one; the default policy applied",
			zap.Int64("signals", signals), zap.Duration("over", now.Sub(window)), zap.String("example", name))
	}
}
