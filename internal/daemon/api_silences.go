package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func (a *api) createSilence(w http.ResponseWriter, r *http.Request) {
	var req silenceRequest
	if !a.decodeBody(w, r, &req) {
		return
	}
	act, ok := a.validAct(w, r, event.Act{By: req.By, Note: cmp.Or(req.Comment, req.Note)}, req.Token != nil)
	if !ok {
		return
	}
	for _, f := range [][2]string{{"device_id", req.DeviceID}, {"device_type", req.DeviceType}} {
		if f[1] == "" {
			continue
		}
		if err := checkID(f[0], f[1]); err != nil {
			a.refuse(w, badID, err.Error())
			return
		}
	}
	s, err := req.silence(a.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !a.silenceInScope(w, r, req) {
		return
	}
	s.By, s.Token = act.By, act.Token
	created, err := a.Silences.Create(r.Context(), s)
	if errors.Is(err, matcher.ErrCostly) {
		a.refuse(w, badMatcher, err.Error())
		return
	}
	if errors.Is(err, silence.ErrInvalid) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if errors.Is(err, silence.ErrTooMany) {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, created)
}

func (a *api) listSilences(w http.ResponseWriter, r *http.Request) {
	list, err := a.Silences.List(r.Context())
	if err != nil {
		a.internal(w, err)
		return
	}
	if list, err = a.silencesInScope(r.Context(), callerOf(r).Scope, list); err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"silences": list})
}

func (a *api) deleteSilence(w http.ResponseWriter, r *http.Request) {
	act, valid := a.actFromQuery(w, r)
	if !valid {
		return
	}
	id := r.PathValue("id")
	if scope := callerOf(r).Scope; !scope.Whole() {
		list, err := a.Silences.List(r.Context())
		if err == nil {
			list, err = a.silencesInScope(r.Context(), scope, list)
		}
		if err != nil {
			a.internal(w, err)
			return
		}
		if !slices.ContainsFunc(list, func(s silence.Silence) bool { return s.ID == id }) {
			writeError(w, http.StatusNotFound, "no such silence")
			return
		}
	}
	ok, err := a.Silences.End(r.Context(), id, act)
	if err != nil {
		a.internal(w, err)
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "no such silence")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// silenceInScope checks a new silence against a scoped caller: a device in its scope, or the type of a
// device_type scope (a type silence would reach beyond a label scope). On refusal it has answered.
func (a *api) silenceInScope(w http.ResponseWriter, r *http.Request, req silenceRequest) bool {
	scope := callerOf(r).Scope
	switch {
	case scope.Whole():
		return true
	case len(req.Matchers) > 0:
		// What a matcher selects is known only as devices come due: it could reach beyond the scope.
		writeError(w, http.StatusForbidden, fmt.Sprintf("a silence with matchers may reach beyond this token's scope %s", scope))
		return false
	case req.DeviceType != "":
		if req.DeviceType != scope.Type {
			writeError(w, http.StatusForbidden, fmt.Sprintf("a silence of type %q reaches beyond this token's scope %s", req.DeviceType, scope))
			return false
		}
		return true
	}
	in, err := a.inScope(r.Context(), scope, req.DeviceID)
	if err != nil {
		a.internal(w, err)
		return false
	}
	if !in {
		writeError(w, http.StatusNotFound, fmt.Sprintf("device %q is not known", req.DeviceID))
	}
	return in
}

// silencesInScope keeps the silences a caller with scope could have created (silenceInScope); never nil.
func (a *api) silencesInScope(ctx context.Context, scope config.Scope, list []silence.Silence) ([]silence.Silence, error) {
	out := make([]silence.Silence, 0, len(list))
	for _, s := range list {
		in := scope.Whole() || s.DeviceType != "" && s.DeviceType == scope.Type
		if !in && s.DeviceID != "" && !scope.Whole() {
			var err error
			if in, err = a.inScope(ctx, scope, s.DeviceID); err != nil {
				return nil, err
			}
		}
		if in {
			out = append(out, s)
		}
	}
	return out, nil
}
