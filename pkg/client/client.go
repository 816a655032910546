// Package client is a small Go client of heartbeatd's HTTP API (docs/http-api.md), the one
// `heartbeatd ctl` uses. It depends on nothing of the daemon: a program that only talks to the API
// imports this package alone.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultServer is the API's address under the default http.listen.
const DefaultServer = "http://127.0.0.1:8080"

// Client calls one heartbeatd API with one bearer token ("" = none).
type Client struct {
	server string
	token  string
	http   *http.Client
}

// New returns a client of the API at server (a base URL, "http://host:port") presenting token.
func New(server, token string) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q: want a base URL like %s", server, DefaultServer)
	}
	return &Client{server: strings.TrimSuffix(server, "/"), token: token, http: &http.Client{Timeout: time.Minute}}, nil
}

// APIError is an answer other than 2xx: its status and the server's error message.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, http.StatusText(e.Status))
}

// Device is one device as the API shows it (GET /v1/devices/{id}, and each of a listing's devices); the
// server answers with this type, so the two cannot drift apart.
type Device struct {
	DeviceID      string     `json:"device_id"`
	DeviceType    string     `json:"device_type"`
	State         string     `json:"state"` // online | late | interrupted | unknown
	Deadline      *time.Time `json:"deadline"`
	LastSeen      *time.Time `json:"last_seen"`
	InterruptedAt *time.Time `json:"interrupted_at"`
	Repeats       int        `json:"repeats"`
	Acked         bool       `json:"acked"`
	Exhausted     bool       `json:"exhausted,omitempty"`
	Parked        bool       `json:"parked,omitempty"`
	NextAlarm     *time.Time `json:"next_alarm,omitempty"`
	SilencedUntil *time.Time `json:"silenced_until"`
	// Parent is the device's gateway or cell; Suppressed says its interruption was reported as
	// `suppressed` because the parent is down (docs/concepts.md).
	Parent     string `json:"parent,omitempty"`
	Suppressed bool   `json:"suppressed,omitempty"`
	// QuietUntil is the end of the quiet interval its type is in now (docs/schedules.md).
	QuietUntil *time.Time `json:"quiet_until,omitempty"`
	// Cause is why its open incident began when it was not silence: `reported` (the device reported a
	// failure, Reason its words) or `offline` (its broker said so); as on the incident's events.
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Availability is the share of each window ("24h", "7d", "30d") the device was not down, counted
	// from when it was first known; Incidents30d its incidents opened in the last 30 days
	// (docs/http-api.md#incidents-and-availability). Only on GET /v1/devices/{id}.
	Availability map[string]float64 `json:"availability,omitempty"`
	Incidents30d *int               `json:"incidents_30d,omitempty"`
}

// DeviceList is one page of GET /v1/devices.
type DeviceList struct {
	Devices    []Device `json:"devices"`
	NextCursor string   `json:"next_cursor"`
}

// ListOptions filters GET /v1/devices; empty fields filter nothing.
type ListOptions struct {
	State, Type, Label, Cursor string
	Limit                      int
}

// Silence is a maintenance window: devices it matches raise no events while it lasts. Detection goes on,
// so a device still silent when the window ends alarms then. The server stores it in this shape.
type Silence struct {
	ID         string    `json:"id"`
	DeviceID   string    `json:"device_id,omitempty"`
	DeviceType string    `json:"device_type,omitempty"`
	Starts     time.Time `json:"starts"`
	Ends       time.Time `json:"ends"`
	Comment    string    `json:"comment,omitempty"`
	// By is who created the silence, when given; its silenced event carries it.
	By string `json:"by,omitempty"`
	// Token names the API token that created it when By names someone else (docs/access.md).
	Token string `json:"token,omitempty"`
	// Matchers narrow or replace DeviceID and DeviceType: a device is silenced when it matches them all.
	Matchers []Matcher `json:"matchers,omitempty"`
	// TimeIntervals name the configuration's time_intervals: the silence covers its devices only inside
	// them, recurring until deleted (Ends is 9999-12-31T23:59:59Z unless given).
	TimeIntervals []string `json:"time_intervals,omitempty"`
}

// RecurringEnds is the Ends the server gives a recurring silence created without one (TimeIntervals and
// no Until or For): it lasts until deleted.
var RecurringEnds = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Matcher selects devices as Alertmanager's matchers select alerts: Label is a registered label's name
// or one of device_id, device_type, parent; Op is =, !=, =~ or !~; a regular expression matches the whole
// value (it is anchored, as in Alertmanager). A device without the label has the empty value
// (docs/schedules.md#recurring-silences).
type Matcher struct {
	Label string `json:"label"`
	Op    string `json:"op"`
	Value string `json:"value"`
}

// NewSilence is the body of POST /v1/silences: DeviceID, DeviceType or Matchers (matchers may narrow
// either); Until, For or TimeIntervals (a recurring silence, until deleted or Until/For).
type NewSilence struct {
	DeviceID      string    `json:"device_id,omitempty"`
	DeviceType    string    `json:"device_type,omitempty"`
	Matchers      []Matcher `json:"matchers,omitempty"`
	TimeIntervals []string  `json:"time_intervals,omitempty"`
	Until         string    `json:"until,omitempty"`
	For           string    `json:"for,omitempty"`
	Comment       string    `json:"comment,omitempty"`
	By            string    `json:"by,omitempty"`
}

// Act is who performs an operator act and why; both optional (the server names the token).
type Act struct {
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
}

// ImportResult is the answer of an import: the first rows that failed, by line, with why.
type ImportResult struct {
	Imported int `json:"imported"`
	Failed   int `json:"failed"`
	Errors   []struct {
		Line  int    `json:"line"`
		Error string `json:"error"`
	} `json:"errors"`
}

// Devices lists one page of devices.
func (c *Client) Devices(ctx context.Context, o ListOptions) (DeviceList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": o.State, "type": o.Type, "label": o.Label, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", fmt.Sprint(o.Limit))
	}
	var out DeviceList
	return out, c.do(ctx, http.MethodGet, "/v1/devices?"+q.Encode(), nil, "", &out)
}

// Device reads one device.
func (c *Client) Device(ctx context.Context, id string) (Device, error) {
	var out Device
	return out, c.do(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(id), nil, "", &out)
}

// Ack acknowledges a device's open interruption.
func (c *Client) Ack(ctx context.Context, id string, act Act) error {
	return c.doJSON(ctx, http.MethodPost, "/v1/devices/"+url.PathEscape(id)+"/ack", act, nil)
}

// Signal sends a signal of device id now, naming its type when typ is not empty; it returns once
// heartbeatd stored it.
func (c *Client) Signal(ctx context.Context, id, typ string) error {
	path := "/v1/devices/" + url.PathEscape(id) + "/signal"
	if typ == "" {
		return c.do(ctx, http.MethodPost, path, nil, "", nil)
	}
	return c.doJSON(ctx, http.MethodPost, path, map[string]string{"type": typ}, nil)
}

// Silences lists the silences.
func (c *Client) Silences(ctx context.Context) ([]Silence, error) {
	var out struct{ Silences []Silence }
	return out.Silences, c.do(ctx, http.MethodGet, "/v1/silences", nil, "", &out)
}

// CreateSilence creates a silence and returns it as stored.
func (c *Client) CreateSilence(ctx context.Context, s NewSilence) (Silence, error) {
	var out Silence
	return out, c.doJSON(ctx, http.MethodPost, "/v1/silences", s, &out)
}

// EndSilence ends a silence now.
func (c *Client) EndSilence(ctx context.Context, id string, act Act) error {
	q := url.Values{}
	if act.By != "" {
		q.Set("by", act.By)
	}
	if act.Note != "" {
		q.Set("note", act.Note)
	}
	return c.do(ctx, http.MethodDelete, "/v1/silences/"+url.PathEscape(id)+"?"+q.Encode(), nil, "", nil)
}

// Outages lists the open and recent correlated outages, as the API writes them.
func (c *Client) Outages(ctx context.Context) ([]map[string]any, error) {
	var out struct{ Outages []map[string]any }
	return out.Outages, c.do(ctx, http.MethodGet, "/v1/outages", nil, "", &out)
}

// Import registers devices in bulk from r: CSV when contentType is text/csv, else NDJSON.
func (c *Client) Import(ctx context.Context, r io.Reader, contentType string) (ImportResult, error) {
	var out ImportResult
	return out, c.do(ctx, http.MethodPost, "/v1/devices:import", r, contentType, &out)
}

// Stats reads /v1/stats, with this replica's timeout advice when advice is true.
func (c *Client) Stats(ctx context.Context, advice bool) (map[string]any, error) {
	path := "/v1/stats"
	if advice {
		path += "?advice=true"
	}
	var out map[string]any
	return out, c.do(ctx, http.MethodGet, path, nil, "", &out)
}

func (c *Client) doJSON(ctx context.Context, method, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, bytes.NewReader(b), "application/json", out)
}

// do sends one request and decodes a 2xx JSON answer into out (nil: the answer is dropped); any other
// answer is an *APIError carrying the server's message.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the JSON expected: %w", method, path, err)
	}
	return nil
}

// IsStatus reports whether err is an APIError with status.
func IsStatus(err error, status int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == status
}
