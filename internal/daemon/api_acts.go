package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ident"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The operator acts on one device (ack, delete): each is stored first, then its event is published with
// the acting token's name.

// ack stops the re-alarms of a device's open incident and publishes `acked`.
func (a *api) ack(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req actRequest
	if !a.decodeOptionalBody(w, r, &req) {
		return
	}
	act, valid := a.validAct(w, r, event.Act{By: req.By, Note: req.Note}, req.Token != nil)
	if !valid {
		return
	}
	// Read first: the acked event names the incident it acknowledged.
	before, _, err := a.Store.Device(r.Context(), id)
	if err != nil {
		a.internal(w, err)
		return
	}
	hold := a.Events.RecoveryHold()
	ok, err := a.Store.SetAcked(r.Context(), id, hold)
	if err != nil {
		a.internal(w, err)
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("device %q has no open interruption (or has signalled since)", id))
		return
	}
	// The incident's recovery waits for the acked event; it goes on without it after the hold at the latest.
	defer func() {
		if hold == 0 {
			return // no event to wait for, no hold set
		}
		if err := a.Store.ActAnnounced(context.WithoutCancel(r.Context()), id); err != nil {
			a.log.Warn("the acked event is out; its device's recovery waits out the hold", zap.String("device_id", id), zap.Error(err))
		}
	}()
	if before.Incident == nil { // opened between the read and the ack
		if before, _, err = a.Store.Device(r.Context(), id); err != nil || before.Incident == nil {
			a.log.Warn("device acknowledged; its acked event is not published: the incident could not be read",
				zap.String("device_id", id), zap.Error(err))
		}
	}
	if before.Incident != nil {
		a.Events.Publish(r.Context(), alarm.AckedEvent(id, before.Type, *before.Incident, a.policy(before), before.LastSeen(), act, a.Now()))
	}
	writeJSON(w, http.StatusOK, map[string]any{"device_id": id, "acked": true})
}

func (a *api) deleteDevice(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	act, ok := a.actFromQuery(w, r)
	if !ok {
		return
	}
	// Read first: the deleted event names the device's type and deadline, which the delete removes.
	d, _, err := a.Store.Device(r.Context(), id)
	if err != nil {
		a.internal(w, err)
		return
	}
	deleted, err := a.Store.Delete(r.Context(), id)
	if err != nil {
		a.internal(w, err)
		return
	}
	if !deleted {
		writeError(w, http.StatusNotFound, fmt.Sprintf("device %q is not known", id))
		return
	}
	stored := deadline.State{Deadline: d.Deadline.UnixMilli()}
	if d.Incident != nil {
		stored = *d.Incident
	}
	var dl, lastSeen time.Time
	if stored.Deadline > 0 {
		dl, lastSeen = alarm.EventTimes(stored, a.policy(d))
		if ls := d.LastSeen(); !ls.IsZero() {
			lastSeen = ls // a moved deadline, or one written under an earlier timeout: the policy cannot tell it
		}
	}
	a.Events.Publish(r.Context(), alarm.DeletedEvent(id, d.Type, dl, dl.Sub(lastSeen), act, a.Now()))
	w.WriteHeader(http.StatusNoContent)
}

// actRequest is the body of an act that takes one (ack): who acts and why, both optional. Token is only
// there to be refused: the acting token is the one presented, never one the request names.
type actRequest struct {
	By    string          `json:"by"`
	Note  string          `json:"note"`
	Token json.RawMessage `json:"token"`
}

// actFromQuery reads an act's optional by and note from the query (DELETE has no body); on failure it
// has answered 400.
func (a *api) actFromQuery(w http.ResponseWriter, r *http.Request) (event.Act, bool) {
	q := r.URL.Query()
	return a.validAct(w, r, event.Act{By: q.Get("by"), Note: q.Get("note")}, q.Has("token"))
}

// validAct checks an act a request asks for and stamps it with its caller (caller.stamp). It answers 400,
// counted as bad input, for an act whose by or note is out of bounds, or when the request named a token
// (namedToken): the event's token is the acting token's name, always.
func (a *api) validAct(w http.ResponseWriter, r *http.Request, act event.Act, namedToken bool) (event.Act, bool) {
	if namedToken {
		a.refuse(w, badAct, "token: the act's token is the bearer token presented, never one the request names; name who acts with by")
		return act, false
	}
	if err := act.Validate(); err != nil {
		a.refuse(w, badAct, err.Error())
		return act, false
	}
	if strings.IndexFunc(act.By, ident.Invisible) >= 0 { // a name: a right-to-left override would show it as another
		a.refuse(w, badAct, fmt.Sprintf("%v: by must not contain control or invisible format characters (%q)", event.ErrInvalidAct, act.By))
		return act, false
	}
	return callerOf(r).stamp(act), true
}
