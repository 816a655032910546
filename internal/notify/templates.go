package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Data is what a receiver sends and its templates see: the event's fields (.DeviceID, .Kind, …), the
// device's .Labels, the receiver, the incident's id, and for a storm's summary .Summary.
type Data struct {
	event.Event
	Labels   map[string]string
	Receiver string
	// Incident is the id of the first opening event of the incident this receiver was told of (PagerDuty's
	// dedup_key); the event's own id for an event of no incident.
	Incident string
	// Summary is set on the one message that stands for a storm the rate limit folded; Kind is then
	// KindSummary and the event's other fields are empty.
	Summary *Summary
}

// KindSummary is the Kind of a summary message.
const KindSummary event.Kind = "summary"

// Summary is a storm folded into one message: how many notifications of which kinds, and the last
// devices among them.
type Summary struct {
	Count   int            `json:"count"`
	Kinds   map[string]int `json:"kinds"`
	Devices []string       `json:"devices"`
	Since   time.Time      `json:"since"`
}

// KindList is the counts by kind as text, kinds in order: "30 interrupted, 7 recovered".
func (s *Summary) KindList() string {
	kinds := slices.Sorted(maps.Keys(s.Kinds))
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", s.Kinds[k], k)
	}
	return strings.Join(parts, ", ")
}

// dataJSON is Data as JSON (pending retries in Redis, the webhook's default body): the event under
// "event", since event.Event's own MarshalJSON would otherwise stand for the whole.
type dataJSON struct {
	Event    *event.Event      `json:"event,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Receiver string            `json:"receiver"`
	Incident string            `json:"incident,omitempty"`
	Summary  *Summary          `json:"summary,omitempty"`
}

// MarshalJSON writes dataJSON.
func (d *Data) MarshalJSON() ([]byte, error) {
	w := dataJSON{Labels: d.Labels, Receiver: d.Receiver, Incident: d.Incident, Summary: d.Summary}
	if d.Summary == nil {
		w.Event = &d.Event
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads dataJSON.
func (d *Data) UnmarshalJSON(b []byte) error {
	var w dataJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*d = Data{Labels: w.Labels, Receiver: w.Receiver, Incident: w.Incident, Summary: w.Summary}
	if w.Event != nil {
		d.Event = *w.Event
	}
	if d.Summary != nil {
		d.Kind = KindSummary
	}
	return nil
}

// funcs are the helpers every template may use (docs/notifications.md).
func funcs(now func() time.Time) template.FuncMap {
	return template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
		"since":            func(t time.Time) string { return humanize(now().Sub(t)) },
		"humanizeDuration": humanizeDuration,
		"join":             strings.Join,
	}
}

// humanizeDuration shows a time.Duration, or a number of milliseconds (silent_for_ms), as "1h2m3s".
func humanizeDuration(v any) (string, error) {
	switch d := v.(type) {
	case time.Duration:
		return humanize(d), nil
	case int64:
		return humanize(time.Duration(d) * time.Millisecond), nil
	case int:
		return humanize(time.Duration(d) * time.Millisecond), nil
	case float64:
		return humanize(time.Duration(d * float64(time.Millisecond))), nil
	}
	return "", fmt.Errorf("humanizeDuration: %T is not a duration or milliseconds", v)
}

func humanize(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// defaultText is the built-in one-line text of a notification (Slack, PagerDuty's summary, e-mail's subject).
const defaultText = `{{ if .Summary }}heartbeatd: {{ .Summary.Count }} notifications folded by the rate limit ` +
	`({{ .Summary.KindList }}), among them {{ join .Summary.Devices ", " }}` +
	`{{ else if .Group }}heartbeatd: {{ .Kind }} of {{ .Count }} devices with {{ .Group.By }}={{ .Group.Value }}: {{ join .Sample ", " }}` +
	`{{ else }}heartbeatd: {{ .DeviceID }}{{ with .DeviceType }} ({{ . }}){{ end }} {{ .Kind }}` +
	`{{ if eq .Kind "recovered" }} after {{ humanizeDuration .SilentForMs }}` +
	`{{ else if not .LastSeen.IsZero }}, silent since {{ .LastSeen.Format "2006-01-02 15:04:05Z07:00" }} ({{ since .LastSeen }} ago){{ end }}` +
	`{{ with .Cause }}, cause {{ . }}{{ end }}{{ with .Reason }}: {{ . }}{{ end }}{{ with .Parent }}, parent {{ . }}{{ end }}{{ end }}`

// defaultEmailBody is the built-in body of an e-mail.
const defaultEmailBody = defaultText + `
{{ if not .Summary }}
device:     {{ .DeviceID }}
type:       {{ .DeviceType }}
kind:       {{ .Kind }}
event id:   {{ .ID }}
incident:   {{ .Incident }}
at:         {{ .At.Format "2006-01-02T15:04:05Z07:00" }}
{{ range $k, $v := .Labels }}{{ $k }}: {{ $v }}
{{ end }}{{ end }}`

// defaultWebhookBody is the built-in body of a webhook: the notification as JSON.
const defaultWebhookBody = `{{ json . }}`

// parseTemplate parses text (or def when text is empty) with the helpers, naming key in its error.
func parseTemplate(key, text, def string, now func() time.Time) (*template.Template, error) {
	if text == "" {
		text = def
	}
	t, err := template.New(key).Option("missingkey=zero").Funcs(funcs(now)).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("notify: %s: %w", key, err)
	}
	return t, nil
}

// render executes t over d.
func render(t *template.Template, d *Data) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("template %s: %w", t.Name(), err)
	}
	return b.String(), nil
}
