package silence

import (
	"context"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Publisher publishes the event of an operator's act and reports whether Kafka took it; the act stands
// either way (internal/alarm's Acts is the daemon's).
type Publisher interface {
	Publish(ctx context.Context, e event.Event) bool
}

// eventOf is the `silenced` or `unsilenced` event of sil: one per silence, id silence/<silence id>/<kind>,
// keyed (device_id) by the matcher: the device, or the type for a type silence, or silence:<id> for one
// of matchers only. deviceType is the silenced device's type where known ("" else); a type silence's is
// its type.
func eventOf(kind event.Kind, sil Silence, deviceType string, act event.Act, now time.Time) event.Event {
	key := sil.DeviceID
	switch {
	case key != "":
	case sil.DeviceType != "":
		key, deviceType = sil.DeviceType, sil.DeviceType
	default:
		key = "silence:" + sil.ID
	}
	e := event.New(kind, key, deviceType, time.Time{}, time.Time{}, now, 0)
	e.ID = EventID(sil.ID, kind)
	e.By, e.Note, e.Token = act.By, act.Note, act.Token
	return e
}

// EventID is the id of a silence's silenced or unsilenced event.
func EventID(silenceID string, kind event.Kind) string {
	return "silence/" + silenceID + "/" + string(kind)
}

// IDOfEvent returns the id of the silence whose silenced or unsilenced event has id eventID
// (EventID's inverse); false for any other event.
func IDOfEvent(eventID string) (string, bool) {
	rest, ok := strings.CutPrefix(eventID, "silence/")
	if !ok {
		return "", false
	}
	id, kind, ok := strings.Cut(rest, "/")
	if !ok || id == "" || (event.Kind(kind) != event.Silenced && event.Kind(kind) != event.Unsilenced) {
		return "", false
	}
	return id, true
}
