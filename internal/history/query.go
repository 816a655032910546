package history

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/pkg/client"
)

// The windows a device's availability is given over (GET /v1/devices/{id}).
var DeviceWindows = []struct {
	Name string
	Span time.Duration
}{{"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}}

// load reads one device's history; an empty one when it has none.
func (s *Store) load(ctx context.Context, device string) (*deviceHistory, error) {
	raw, err := s.opts.Client.Get(ctx, s.keys.device(device)).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("history: read: %w", err)
	}
	h, err := decode(raw)
	if err != nil {
		s.anomalies.WithLabelValues("corrupt").Inc()
		return nil, err
	}
	// What retention dropped is not shown even before the device's next write trims it.
	s.trim(h, s.opts.Now().UnixMilli())
	return h, nil
}

// Summary is a device's availability over DeviceWindows and its incidents of the last 30 days.
type Summary struct {
	Availability map[string]float64
	Incidents30d int
}

// Device is the availability of one device (docs/http-api.md#incidents-and-availability): per window,
// 1 − its downtime inside the window / the part of the window since it was first known.
func (s *Store) Device(ctx context.Context, device string) (Summary, error) {
	h, err := s.load(ctx, device)
	if err != nil {
		return Summary{}, err
	}
	return summarize(h, s.opts.Now().UnixMilli()), nil
}

func summarize(h *deviceHistory, now int64) Summary {
	out := Summary{Availability: map[string]float64{}}
	for _, w := range DeviceWindows {
		out.Availability[w.Name] = availability(h, now-w.Span.Milliseconds(), now)
	}
	month := now - 30*dayMs
	for _, in := range h.Incidents {
		if in.Opened >= month {
			out.Incidents30d++
		}
	}
	return out
}

// availability is the share of [from, now) since h's device was first known that it was not down.
func availability(h *deviceHistory, from, now int64) float64 {
	if len(h.Incidents) == 0 {
		return 1
	}
	from = max(from, h.KnownSince)
	if now <= from {
		return 1
	}
	var down int64
	for i := range h.Incidents {
		down += overlap(&h.Incidents[i], from, now)
	}
	return 1 - float64(min(down, now-from))/float64(now-from)
}

// MaxListLimit bounds a page of a device's incidents.
const MaxListLimit = 1000

// Incidents is a page of device's incidents, newest first: at most limit opened before cursor (the
// previous page's next cursor, "" for the first page). The next cursor is "" after the last page.
func (s *Store) Incidents(ctx context.Context, device string, limit int, cursor string) ([]client.Incident, string, error) {
	before := int64(-1)
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n < 0 {
			return nil, "", fmt.Errorf("%w: cursor %q is not one this API returned", ErrBadRequest, cursor)
		}
		before = n
	}
	h, err := s.load(ctx, device)
	if err != nil {
		return nil, "", err
	}
	now := s.opts.Now().UnixMilli()
	out := []client.Incident{}
	for i := len(h.Incidents) - 1; i >= 0; i-- {
		in := &h.Incidents[i]
		if before >= 0 && in.Opened >= before {
			continue
		}
		if len(out) == limit {
			return out, strconv.FormatInt(h.Incidents[i+1].Opened, 10), nil
		}
		out = append(out, in.View(device, now))
	}
	return out, "", nil
}

// ErrBadRequest is wrapped by the errors of a request's bad parameters.
var ErrBadRequest = errors.New("bad request")

// ErrNotKept is the ErrBadRequest of a grouping by a label history.group_labels does not name.
var ErrNotKept = fmt.Errorf("%w: no figures kept", ErrBadRequest)

// View is the incident as the API shows it.
func (in *Incident) View(device string, now int64) client.Incident {
	v := client.Incident{ID: in.ID(device), Opened: time.UnixMilli(in.Opened).UTC(), DownMs: in.DownMs(now),
		FirstKind: string(in.FirstKind), Cause: in.Cause, Reason: in.Reason, Repeats: in.Repeats, Exhausted: in.Exhausted,
		Parent: in.Parent, OutageID: in.OutageID}
	if !in.Open() {
		t := time.UnixMilli(in.Closed).UTC()
		v.Closed = &t
	}
	if in.AckedAt != 0 {
		v.Acked = &client.IncidentAck{By: in.AckedBy, At: time.UnixMilli(in.AckedAt).UTC()}
	}
	return v
}
