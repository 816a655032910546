package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/internal/silence"
)

// silenceRequest is the body of POST /v1/silences (docs/http-api.md, docs/schedules.md).
type silenceRequest struct {
	DeviceID   string `json:"device_id"`
	DeviceType string `json:"device_type"`
	Until      string `json:"until"`
	For        string `json:"for"`
	Comment    string `json:"comment"`
	// Note is another name for comment, as every act takes one; By is who creates the silence.
	Note string `json:"note"`
	By   string `json:"by"`
	// Token is only there to be refused (actRequest).
	Token json.RawMessage `json:"token"`
	// Matchers select devices by labels, device_type, device_id or parent; TimeIntervals make the
	// silence recurring, inside the named configured intervals, until deleted.
	Matchers      []matcher.Matcher `json:"matchers"`
	TimeIntervals []string          `json:"time_intervals"`
}

// silence checks the request and builds the silence it asks for; the error is the 400's message. What
// only the store can tell (unknown interval names, bad matchers) it reports as silence.ErrInvalid.
func (req silenceRequest) silence(now time.Time) (silence.Silence, error) {
	switch {
	case req.DeviceID == "" && req.DeviceType == "" && len(req.Matchers) == 0:
		return silence.Silence{}, errors.New("give device_id, device_type or matchers")
	case req.DeviceID != "" && req.DeviceType != "":
		return silence.Silence{}, errors.New("give device_id or device_type, not both (a matcher can narrow a type)")
	case req.Comment != "" && req.Note != "" && req.Comment != req.Note:
		return silence.Silence{}, errors.New("comment and note are the same field: give one")
	}
	s := silence.Silence{DeviceID: req.DeviceID, DeviceType: req.DeviceType, Starts: now, Comment: cmp.Or(req.Comment, req.Note),
		By: req.By, Matchers: req.Matchers, TimeIntervals: req.TimeIntervals}
	switch {
	case req.Until != "" && req.For != "":
		return s, errors.New("give either until or for, not both")
	case req.Until != "":
		t, err := time.Parse(time.RFC3339, req.Until)
		if err != nil {
			return s, errors.New("until: " + err.Error())
		}
		s.Ends = t
	case req.For != "":
		d, err := time.ParseDuration(req.For)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("for: %q is not a positive duration like 2h", req.For)
		}
		s.Ends = now.Add(d)
	case len(req.TimeIntervals) > 0:
		return s, nil // recurring until deleted
	default:
		return s, errors.New("until, for or time_intervals is required")
	}
	if !s.Ends.After(now) {
		return s, errors.New("the silence would end in the past")
	}
	if s.Ends.UTC().Year() > 9999 {
		// RFC 3339, which stores and shows it, has four-digit years.
		return s, errors.New("until: after the year 9999")
	}
	return s, nil
}

// viewSchedules completes a device's view for schedules (docs/schedules.md): a deadline moved by a quiet
// interval is no incident, so the device shows online with the moved deadline; a type with expected
// times shows its recorded last signal; a type in a quiet interval says until when.
func (a *api) viewSchedules(v *DeviceView, d deadline.Device) {
	if inc := d.Incident; inc != nil && inc.Hold == deadline.HoldQuiet && inc.Next == 0 {
		v.State, v.Deadline, v.NextAlarm = "online", ptr(time.UnixMilli(inc.InterruptedAt)), nil
	}
	if !d.LastSignal.IsZero() {
		v.LastSeen = ptr(d.LastSignal)
	}
	if a.QuietUntil != nil {
		v.QuietUntil = ptr(a.QuietUntil(d.Type, a.Now()))
	}
}

// silencedByFacts completes the views of page (views[i] is page[i]'s) for silences whose matchers look
// at labels or parents, which the view's SilencedUntil sees empty: one read of the devices' labels, only
// while some silence needs them.
func (a *api) silencedByFacts(ctx context.Context, views []DeviceView, page []deadline.Device) error {
	fc, ok := a.Silences.(alarm.FactsChecker)
	if !ok || !fc.NeedsFacts() || len(page) == 0 {
		return nil
	}
	ids := make([]string, len(page))
	for i, d := range page {
		ids[i] = d.ID
	}
	labels, err := a.Store.Registry().Labels(ctx, ids)
	if err != nil {
		return err
	}
	now := a.Now()
	for i, d := range page {
		f := silence.Facts{DeviceID: d.ID, DeviceType: d.Type, Parent: d.Parent, Labels: labels[i]}
		views[i].SilencedUntil = ptr(fc.SilencedUntilFacts(f, now))
	}
	return nil
}
