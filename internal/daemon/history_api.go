package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/pkg/client"
)

// The routes of past incidents and availability (docs/http-api.md#incidents-and-availability).

// defaultIncidentsLimit is a page of GET /v1/devices/{id}/incidents without limit.
const defaultIncidentsLimit = 50

// defaultAvailabilityWindow is GET /v1/availability's window without one.
const defaultAvailabilityWindow = "7d"

// withAvailability adds a device's availability and incidents of the last 30 days to its view.
func (a *api) withAvailability(r *http.Request, v *DeviceView) error {
	if a.History == nil {
		return nil
	}
	s, err := a.History.Device(r.Context(), v.DeviceID)
	if err != nil {
		return err
	}
	v.Availability, v.Incidents30d = s.Availability, &s.Incidents30d
	return nil
}

func (a *api) incidents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultIncidentsLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > history.MaxListLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a number from 1 to %d", history.MaxListLimit))
			return
		}
		limit = n
	}
	list := client.IncidentList{Incidents: []client.Incident{}}
	if a.History != nil {
		var err error
		list.Incidents, list.NextCursor, err = a.History.Incidents(r.Context(), r.PathValue("id"), limit, q.Get("cursor"))
		if a.historyFailed(w, err) {
			return
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (a *api) availability(w http.ResponseWriter, r *http.Request) {
	if a.History == nil {
		writeError(w, http.StatusServiceUnavailable, "the incident history is not kept by this server")
		return
	}
	q := r.URL.Query()
	name := q.Get("window")
	if name == "" {
		name = defaultAvailabilityWindow
	}
	window, err := parseWindow(name)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	query := history.GroupQuery{Window: window, GroupBy: q.Get("group_by")}
	if own, only := scopeGroup(callerOf(r).Scope); own != "" {
		// A scope sees its own group alone: any other grouping's groups would hold devices outside it.
		if query.GroupBy != "" && query.GroupBy != own {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("a token scoped to %s may group only by %s", callerOf(r).Scope, own))
			return
		}
		query.GroupBy, query.Only = own, only
	}
	if query.GroupBy == "" {
		c, err := a.Store.Count(r.Context())
		if err != nil {
			a.internal(w, err)
			return
		}
		query.FleetSize = c.Online + c.Interrupted
	}
	groups, err := a.History.Groups(r.Context(), query)
	if errors.Is(err, history.ErrNotKept) && query.Only != "" {
		// A scoped token cannot ask for another grouping: no figures by its label is an empty answer.
		groups, err = []client.AvailabilityGroup{}, nil
	}
	if a.historyFailed(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, client.Availability{Window: name, GroupBy: query.GroupBy, Groups: groups})
}

// withGroups adds to a /v1/stats body, with group_by, the devices with an open incident per group value
// (by_group), from the counts the history keeps as incidents open and close: no walk of the fleet. A
// scoped token may group only by its scope's grouping and gets its own group's count. On an error it has
// answered and returns false.
func (a *api) withGroups(w http.ResponseWriter, r *http.Request, body map[string]any, scope config.Scope) bool {
	groupBy := r.URL.Query().Get("group_by")
	if groupBy == "" {
		return true
	}
	if a.History == nil {
		writeError(w, http.StatusServiceUnavailable, "the incident history is not kept by this server")
		return false
	}
	own, only := scopeGroup(scope)
	if own != "" && groupBy != own {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("a token scoped to %s may group only by %s", scope, own))
		return false
	}
	counts, err := a.History.OpenByGroup(r.Context(), groupBy)
	if a.historyFailed(w, err) {
		return false
	}
	if own != "" {
		counts = map[string]int64{only: counts[only]}
	}
	body["by_group"] = map[string]any{"group_by": groupBy, "interrupted": counts}
	return true
}

// scopeGroup is the grouping a scoped token's devices form and its value; "" for the whole fleet.
func scopeGroup(scope config.Scope) (groupBy, value string) {
	switch {
	case scope.Type != "":
		return "device_type", scope.Type
	case scope.Label != "":
		return "label." + scope.Label, scope.Value
	}
	return "", ""
}

// historyFailed answers a history error: 400 for the request's fault, 503 for Redis's.
func (a *api) historyFailed(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, history.ErrBadRequest):
		writeError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), history.ErrBadRequest.Error()+": "))
	default:
		a.internal(w, err)
	}
	return true
}

// parseWindow reads an availability window: a number of days ("7d") or a Go duration ("24h").
func parseWindow(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("window must be a number of days (7d) or a duration (24h), got %q", s)
}
