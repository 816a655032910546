package alertmanager

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The alert names heartbeatd posts.
const (
	// alertDeviceSilent is one open incident of one device.
	alertDeviceSilent = "DeviceSilent"
	// alertDeviceOutage is one correlated outage (outage_started until outage_ended).
	alertDeviceOutage = "DeviceOutage"
)

// The labels heartbeatd sets; config.AlertmanagerOwnLabels keeps the configured labels off them.
const (
	labelAlertName   = "alertname"
	labelDevice      = "device_id"
	labelType        = "device_type"
	labelParent      = "parent"
	labelInhibitedBy = "inhibited_by"
	labelOutage      = "outage_id"
	labelGroupBy     = "group_by"
	labelGroupValue  = "group_value"
	// labelSeverity is set on a `late` device's alert only: severity=warning, a label set of its own,
	// resolved when the incident is interrupted (its usual alert) or recovers.
	labelSeverity = "severity"
)

// alert is one alert before it is posted.
type alert struct {
	labels      map[string]string
	annotations map[string]string
	startsAt    time.Time
	endsAt      time.Time
}

// resolved reports whether the alert ends at or before now: posted, it resolves what it matches.
func (a alert) resolved(now time.Time) bool { return !a.endsAt.After(now) }

// key identifies the alert as Alertmanager does: by its label set.
func (a alert) key() string {
	names := slices.Sorted(maps.Keys(a.labels))
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(0)
		b.WriteString(a.labels[n])
		b.WriteByte(0)
	}
	return b.String()
}

// timeLayout is what Alertmanager's API parses (strfmt.DateTime): RFC 3339 with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// MarshalJSON writes Alertmanager's PostableAlert.
func (a alert) MarshalJSON() ([]byte, error) {
	w := struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations,omitempty"`
		StartsAt    string            `json:"startsAt,omitempty"`
		EndsAt      string            `json:"endsAt,omitempty"`
	}{Labels: a.labels, Annotations: a.annotations}
	if !a.startsAt.IsZero() {
		w.StartsAt = a.startsAt.UTC().Format(timeLayout)
	}
	if !a.endsAt.IsZero() {
		w.EndsAt = a.endsAt.UTC().Format(timeLayout)
	}
	return json.Marshal(w)
}

// incident is what an alert of one device is made from: an event, or an open incident read from Redis.
type incident struct {
	device, typ string
	deadline    time.Time
	lastSeen    time.Time
	// parent is the device's parent; inhibitedBy the parent (suppressed) or outage that explains its
	// silence, marked so a route can send the alert to a null receiver.
	parent, inhibitedBy string
	// warning: the incident was only reported `late` (its deadline is the warning's).
	warning bool
	// cause and reason: why it began when it was not silence (annotations: they may be learnt after the
	// alert's first post, and a label that changes makes another alert).
	cause, reason string
}

// extras are the labels of an incident beyond its device and type: what must stay the same on every
// post of the incident, or Alertmanager sees another alert.
type extras struct {
	parent, inhibitedBy string
	warning             bool
}

func (i incident) extras() extras {
	return extras{parent: i.parent, inhibitedBy: i.inhibitedBy, warning: i.warning}
}

// labels is the label set of an incident's alert: the configured labels, then heartbeatd's own (which
// the configuration may not override). Empty values are left out, as Alertmanager treats them.
func (o *Output) labels(device, typ string, x extras) map[string]string {
	l := make(map[string]string, len(o.opts.Labels)+5)
	maps.Copy(l, o.opts.Labels)
	l[labelAlertName] = alertDeviceSilent
	l[labelDevice] = device
	set := func(name, v string) {
		if v != "" {
			l[name] = v
		}
	}
	set(labelType, typ)
	set(labelParent, x.parent)
	set(labelInhibitedBy, x.inhibitedBy)
	if x.warning {
		l[labelSeverity] = "warning"
	}
	return l
}

// firing is the alert of an open incident: it starts at the deadline, so every post of the incident
// carries the same start, and ends AlertmanagerEndsAfter resends from now unless posted again.
func (o *Output) firing(inc incident, now time.Time) alert {
	a := alert{labels: o.labels(inc.device, inc.typ, inc.extras()), startsAt: inc.deadline, endsAt: now.Add(o.endsAfter())}
	if a.startsAt.IsZero() || a.startsAt.After(now) {
		a.startsAt = now
	}
	state := "silent"
	switch {
	case inc.warning:
		state = "late"
	case inc.cause == event.CauseReported:
		state = "failed (reported)"
	case inc.cause == event.CauseOffline:
		state = "offline"
	}
	a.annotations = map[string]string{"summary": fmt.Sprintf("%s is %s", inc.device, state)}
	if inc.typ != "" {
		a.annotations["summary"] = fmt.Sprintf("%s (%s) is %s", inc.device, inc.typ, state)
	}
	if !inc.lastSeen.IsZero() {
		a.annotations["last_seen"] = inc.lastSeen.UTC().Format(time.RFC3339)
		if now.After(inc.lastSeen) {
			a.annotations["silent_for"] = now.Sub(inc.lastSeen).Round(time.Second).String()
		}
		a.annotations["summary"] += " since " + inc.lastSeen.UTC().Format(time.RFC3339)
	}
	if inc.cause != "" {
		a.annotations["cause"] = inc.cause
	}
	if inc.reason != "" {
		a.annotations["reason"] = inc.reason
		a.annotations["summary"] += ": " + inc.reason
	}
	return a
}

// resolve is the alert with labels that ends now; it starts at start (the deadline, where known) so
// Alertmanager merges it into the firing alert, never before its start.
func resolve(labels map[string]string, start, now time.Time) alert {
	if start.IsZero() || !start.Before(now) {
		start = now.Add(-time.Millisecond)
	}
	return alert{labels: labels, startsAt: start, endsAt: now}
}

// fromEvent is the incident an event of a device reports. A suppressed event's device is inhibited by
// its parent; an event carrying an outage id by that outage.
func fromEvent(e event.Event) incident {
	inc := incident{device: e.DeviceID, typ: e.DeviceType, deadline: e.Deadline, lastSeen: e.LastSeen, parent: e.Parent,
		warning: e.Kind == event.Late, cause: e.Cause, reason: e.Reason}
	switch {
	case e.OutageID != "":
		inc.inhibitedBy = e.OutageID
	case e.Kind == event.Suppressed && e.Parent != "":
		inc.inhibitedBy = e.Parent
	}
	return inc
}

// outageOf is the outage an outage_started or outage_ended event reports (its deadline is the start).
func outageOf(e event.Event) correlate.Outage {
	o := correlate.Outage{ID: e.OutageID, StartedAt: e.Deadline, Count: e.Count, Sample: e.Sample}
	if e.Group != nil {
		o.Group = *e.Group
	}
	return o
}

// outageAlert is the DeviceOutage alert of an outage, resolved once it ended: labelled by the outage and
// its group, so a route or an inhibit rule can use them. The members interrupted while it lasts carry
// inhibited_by = its id.
func (o *Output) outageAlert(out correlate.Outage, ended bool, now time.Time) alert {
	l := make(map[string]string, len(o.opts.Labels)+4)
	maps.Copy(l, o.opts.Labels)
	l[labelAlertName] = alertDeviceOutage
	l[labelOutage] = out.ID
	if out.Group.By != "" {
		l[labelGroupBy] = out.Group.By
	}
	if out.Group.Value != "" {
		l[labelGroupValue] = out.Group.Value
	}
	if ended {
		return resolve(l, out.StartedAt, now)
	}
	a := alert{labels: l, startsAt: out.StartedAt, endsAt: now.Add(o.endsAfter())}
	if a.startsAt.IsZero() || a.startsAt.After(now) {
		a.startsAt = now
	}
	a.annotations = map[string]string{
		"summary": fmt.Sprintf("%d devices with %s=%s silent together", out.Count, out.Group.By, out.Group.Value),
		"sample":  strings.Join(out.Sample, ", "),
	}
	return a
}
