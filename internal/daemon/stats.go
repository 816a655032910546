package daemon

import (
	"net/http"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// stats answers GET /v1/stats (docs/http-api.md#stats); a scoped token gets scopedStats.
func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	if scope := callerOf(r).Scope; !scope.Whole() {
		a.scopedStats(w, r, scope)
		return
	}
	c, err := a.Store.Count(r.Context())
	if err != nil {
		a.internal(w, err)
		return
	}
	body := map[string]any{
		"devices":        map[string]int64{"online": c.Online, "interrupted": c.Interrupted},
		"dead_claims":    c.Parked,
		"claims_pending": c.Pending,
		"hold_back":      a.HoldBack(),
		"owned_slots":    a.OwnedSlots(),
		"slots":          a.Store.Slots(),
	}
	if a.QuietNow != nil {
		body["quiet"] = a.QuietNow(a.Now())
	}
	if c.Parked > 0 {
		parked, err := a.Store.ParkedClaims(r.Context(), parkedShown)
		if err != nil {
			a.internal(w, err)
			return
		}
		views := make([]parkedView, len(parked))
		for i, p := range parked {
			views[i] = parkedView{DeviceID: p.Device, ParkedAt: p.At.UTC(), Reason: p.Reason}
		}
		body["parked"] = views
	}
	// Per-type counts scan every device: only on request, and shared (typeCountsCache).
	if r.URL.Query().Get("by_type") == "true" {
		tc, err := a.typeCounts.get(r.Context(), a.Now, a.TypeCountsTTL, a.Store.CountByType)
		if err != nil {
			a.internal(w, err)
			return
		}
		body["by_type"] = map[string]any{"online": tc.online, "interrupted": tc.interrupted, "as_of": tc.at.UTC()}
	}
	if r.URL.Query().Get("advice") == "true" && a.Advice != nil {
		body["advice"] = a.Advice()
	}
	if !a.withGroups(w, r, body, config.Scope{}) {
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// parkedShown is how many parked claims /v1/stats names besides their count (dead_claims).
const parkedShown = 10

// parkedView is one parked claim in /v1/stats.
type parkedView struct {
	DeviceID string    `json:"device_id"`
	ParkedAt time.Time `json:"parked_at"`
	Reason   string    `json:"reason"`
}

// scopedStats answers GET /v1/stats to a scoped token: this replica's own state (hold-back, slots),
// which names no device; for a device_type scope its type's quiet spell and, with by_type=true, its
// type's counts from the shared per-type scan any read token may ask for. Fleet counts, parked claims and
// advice are left out: they count or name devices anywhere, and a label's counts would need a fleet walk.
func (a *api) scopedStats(w http.ResponseWriter, r *http.Request, scope config.Scope) {
	body := map[string]any{"scope": scope.String(), "hold_back": a.HoldBack(), "owned_slots": a.OwnedSlots(), "slots": a.Store.Slots()}
	if !a.withGroups(w, r, body, scope) {
		return
	}
	if scope.Type == "" {
		writeJSON(w, http.StatusOK, body)
		return
	}
	if a.QuietNow != nil {
		quiet := a.QuietNow(a.Now())
		for typ := range quiet {
			if typ != scope.Type {
				delete(quiet, typ)
			}
		}
		body["quiet"] = quiet
	}
	if r.URL.Query().Get("by_type") == "true" {
		tc, err := a.typeCounts.get(r.Context(), a.Now, a.TypeCountsTTL, a.Store.CountByType)
		if err != nil {
			a.internal(w, err)
			return
		}
		body["by_type"] = map[string]any{"online": ofType(tc.online, scope.Type), "interrupted": ofType(tc.interrupted, scope.Type), "as_of": tc.at.UTC()}
	}
	writeJSON(w, http.StatusOK, body)
}

// ofType is the count of typ (its devices with timeouts of their own included) as a map.
func ofType(counts map[string]int64, typ string) map[string]int64 {
	return map[string]int64{typ: counts[typ]}
}
