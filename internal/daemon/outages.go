package daemon

import (
	"fmt"
	"net/http"
)

// outages answers GET /v1/outages: the open correlated outages and the last ended ones, newest first;
// for a scoped token those whose group is its scope (groupInScope).
func (a *api) outages(w http.ResponseWriter, r *http.Request) {
	list, err := a.Outages.Outages(r.Context())
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"outages": outagesInScope(list, callerOf(r).Scope)})
}

// outage answers GET /v1/outages/{id}; an id holds slashes (outage:<by>:<value>/<start ms>).
func (a *api) outage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	list, err := a.Outages.Outages(r.Context())
	if err != nil {
		a.internal(w, err)
		return
	}
	for _, o := range outagesInScope(list, callerOf(r).Scope) { // one outside the scope is not known
		if o.ID == id {
			writeJSON(w, http.StatusOK, o)
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("outage %q is neither open nor among the last ended", id))
}
