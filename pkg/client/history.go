package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Incident is one past or open incident of a device (GET /v1/devices/{id}/incidents).
type Incident struct {
	// ID is the id of the event that opened it; Opened that event's deadline.
	ID     string     `json:"id"`
	Opened time.Time  `json:"opened"`
	Closed *time.Time `json:"closed"` // the recovering signal's time; null while open
	// DownMs is its downtime: from its first interrupted or suppressed to its close, or to now while
	// open; 0 for an incident that was only late.
	DownMs    int64        `json:"down_ms"`
	FirstKind string       `json:"first_kind"` // late, interrupted or suppressed
	Cause     string       `json:"cause,omitempty"`
	Reason    string       `json:"reason,omitempty"`
	Repeats   int          `json:"repeats"`
	Exhausted bool         `json:"exhausted,omitempty"`
	Acked     *IncidentAck `json:"acked"`
	Parent    string       `json:"parent,omitempty"`
	OutageID  string       `json:"outage_id,omitempty"`
}

// IncidentAck is who acknowledged an incident, and when.
type IncidentAck struct {
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// IncidentList is one page of a device's incidents, newest first.
type IncidentList struct {
	Incidents  []Incident `json:"incidents"`
	NextCursor string     `json:"next_cursor"`
}

// Availability is GET /v1/availability: per group, its devices' availability over the window.
type Availability struct {
	Window  string              `json:"window"`
	GroupBy string              `json:"group_by"` // "" for the whole fleet as one group
	Groups  []AvailabilityGroup `json:"groups"`
}

// AvailabilityGroup is one group's figures over the window.
type AvailabilityGroup struct {
	Value string `json:"value"` // the group's device_type or label value; "" for the whole fleet
	// Devices are the group's devices that were down or had an incident in the window, or for the whole
	// fleet (Value "") every device; DownMs and Incidents their sums; Availability the mean over Devices
	// (docs/http-api.md#incidents-and-availability).
	Devices        int                  `json:"devices"`
	Incidents      int64                `json:"incidents"`
	DownMs         int64                `json:"down_ms"`
	Availability   float64              `json:"availability"`
	LeastAvailable []DeviceAvailability `json:"least_available"`
}

// DeviceAvailability is one device's figures in a group.
type DeviceAvailability struct {
	DeviceID     string  `json:"device_id"`
	Availability float64 `json:"availability"`
	DownMs       int64   `json:"down_ms"`
	Incidents    int64   `json:"incidents"`
}

// Incidents returns a page of a device's incidents, newest first; cursor is the previous page's
// NextCursor ("" for the first).
func (c *Client) Incidents(ctx context.Context, id string, limit int, cursor string) (IncidentList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out IncidentList
	err := c.do(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(id)+"/incidents?"+q.Encode(), nil, "", &out)
	return out, err
}

// Availability returns the availability of the fleet's groups over window ("24h", "7d", "30d"; "" for
// the server's default), grouped by groupBy ("device_type", "label.<name>"; "" for the whole fleet).
func (c *Client) Availability(ctx context.Context, window, groupBy string) (Availability, error) {
	q := url.Values{}
	if window != "" {
		q.Set("window", window)
	}
	if groupBy != "" {
		q.Set("group_by", groupBy)
	}
	var out Availability
	err := c.do(ctx, http.MethodGet, "/v1/availability?"+q.Encode(), nil, "", &out)
	return out, err
}
