package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Receiver delivers one notification. Its error is a *DeliveryError when the receiver answered.
type Receiver interface {
	Name() string
	Send(ctx context.Context, d *Data) error
}

// DeliveryError is a receiver's refusal: its status and the start of its answer, for the dead letter.
type DeliveryError struct {
	Status int
	Answer string
	// Permanent: sending the same again cannot help (a 4xx other than 408 and 429; SMTP 5xx).
	Permanent bool
}

func (e *DeliveryError) Error() string {
	if e.Answer == "" {
		return fmt.Sprintf("notify: answered %d", e.Status)
	}
	return fmt.Sprintf("notify: answered %d: %s", e.Status, e.Answer)
}

// permanent reports whether err is a refusal that a retry cannot change.
func permanent(err error) bool {
	var de *DeliveryError
	return errors.As(err, &de) && de.Permanent
}

// maxAnswer bounds the answer kept from a receiver.
const maxAnswer = 512

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// post sends one HTTP request and turns anything but a 2xx into a *DeliveryError.
func post(ctx context.Context, client *http.Client, method, url string, header http.Header, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return &DeliveryError{Answer: err.Error(), Permanent: true}
	}
	req.Header = header
	resp, err := client.Do(req)
	if err != nil {
		// The URL may carry a secret (Slack's webhook): say what failed without it.
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) && ue.Unwrap() != nil {
			err = ue.Unwrap()
		}
		return fmt.Errorf("notify: %s %s: %w", method, config.RedactURL(url), err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	s := resp.StatusCode
	return &DeliveryError{Status: s, Answer: clip(strings.TrimSpace(string(answer)), maxAnswer),
		Permanent: s >= 400 && s < 500 && s != http.StatusTooManyRequests && s != http.StatusRequestTimeout}
}

func jsonHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "User-Agent": {"heartbeatd"}}
}

// DefaultPagerDutyURL is the Events API v2 endpoint.
const DefaultPagerDutyURL = "https://events.pagerduty.com/v2/enqueue"

type pagerDuty struct {
	name, url, key string
	summary        *template.Template
	client         *http.Client
}

// closes are the kinds that end an incident.
func closes(k event.Kind) bool {
	return k == event.Recovered || k == event.Deleted || k == event.OutageEnded
}

// opens are the kinds that open one.
func opens(k event.Kind) bool {
	return k == event.Interrupted || k == event.Late || k == event.Suppressed || k == event.OutageStarted
}

// severity is PagerDuty's severity of a kind.
func severity(k event.Kind) string {
	switch k {
	case event.Interrupted, event.Alarm, event.Exhausted, event.OutageStarted:
		return "critical"
	case event.Late, event.Suppressed, event.Flapping, KindSummary:
		return "warning"
	}
	return "info"
}

func (p *pagerDuty) Name() string { return p.name }

func (p *pagerDuty) Send(ctx context.Context, d *Data) error {
	summary, err := render(p.summary, d)
	if err != nil {
		return &DeliveryError{Answer: err.Error(), Permanent: true}
	}
	action := "trigger"
	switch {
	case closes(d.Kind):
		action = "resolve"
	case d.Kind == event.Acked:
		action = "acknowledge"
	}
	dedup := d.Incident
	if d.Summary != nil {
		dedup = fmt.Sprintf("heartbeatd/summary/%s/%d", d.Receiver, d.Summary.Since.UnixMilli())
	}
	msg := map[string]any{"routing_key": p.key, "event_action": action, "dedup_key": dedup, "client": "heartbeatd"}
	if action == "trigger" {
		source := d.DeviceID
		if source == "" {
			source = "heartbeatd"
		}
		at := d.At
		if at.IsZero() {
			at = time.Now()
		}
		msg["payload"] = map[string]any{
			"summary": clip(summary, 1024), "source": source, "severity": severity(d.Kind),
			"timestamp": at.UTC().Format(time.RFC3339Nano), "component": d.DeviceType, "class": string(d.Kind),
			"custom_details": d,
		}
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return &DeliveryError{Answer: err.Error(), Permanent: true}
	}
	return post(ctx, p.client, http.MethodPost, p.url, jsonHeader(), body)
}

type slack struct {
	name, url string
	text      *template.Template
	client    *http.Client
}

func (s *slack) Name() string { return s.name }

func (s *slack) Send(ctx context.Context, d *Data) error {
	text, err := render(s.text, d)
	if err != nil {
		return &DeliveryError{Answer: err.Error(), Permanent: true}
	}
	body, _ := json.Marshal(map[string]string{"text": text})
	return post(ctx, s.client, http.MethodPost, s.url, jsonHeader(), body)
}

type webhook struct {
	name, url, method string
	header            http.Header
	body              *template.Template
	client            *http.Client
}

func (w *webhook) Name() string { return w.name }

func (w *webhook) Send(ctx context.Context, d *Data) error {
	body, err := render(w.body, d)
	if err != nil {
		return &DeliveryError{Answer: err.Error(), Permanent: true}
	}
	return post(ctx, w.client, w.method, w.url, w.header.Clone(), []byte(body))
}

// newHTTPReceiver builds a pagerduty, slack or webhook receiver.
func newHTTPReceiver(key string, r config.NotifyReceiver, now func() time.Time) (Receiver, error) {
	client := &http.Client{Timeout: r.DeliveryTimeout()}
	switch {
	case r.PagerDuty != nil:
		t, err := parseTemplate(key+".pagerduty.summary", r.PagerDuty.Summary, defaultText, now)
		url := r.PagerDuty.URL
		if url == "" {
			url = DefaultPagerDutyURL
		}
		return &pagerDuty{name: r.Name, url: url, key: r.PagerDuty.RoutingKey, summary: t, client: client}, err
	case r.Slack != nil:
		t, err := parseTemplate(key+".slack.text", r.Slack.Text, defaultText, now)
		return &slack{name: r.Name, url: r.Slack.WebhookURL, text: t, client: client}, err
	}
	w := r.Webhook
	t, err := parseTemplate(key+".webhook.body", w.Body, defaultWebhookBody, now)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := w.TLS.Build()
	if err != nil {
		return nil, fmt.Errorf("notify: %s.webhook.tls: %w", key, err)
	}
	if tlsCfg != nil {
		client.Transport = &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}
	}
	header := jsonHeader()
	for name, h := range w.Headers {
		header.Set(name, h.Value)
	}
	method := w.Method
	if method == "" {
		method = http.MethodPost
	}
	return &webhook{name: r.Name, url: w.URL, method: method, header: header, body: t, client: client}, nil
}
