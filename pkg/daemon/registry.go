package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/ingest"
)

// The device registry (docs/http-api.md, §9): PUT /v1/devices/{id} registers one device, POST /v1/devices:import
// many. A registered device that never signals alarms at registration + its timeout; a per-device timeout
// overrides its type's from its next signal; labels serve correlation (labels.<name>) and the listing
// filter. PUT replaces the registration: a field left out is cleared, except the parent, which signals
// may name too and stays until named anew.

// maxImportBytes bounds one import's body: 1M rows of about 100 bytes with room to spare. It is read as
// a stream, a batch of rows at a time, so memory does not grow with it.
const maxImportBytes = 256 << 20

// importBatch is how many rows one registry write carries.
const importBatch = 4000

// importTimeout bounds one import's reading and answering.
const importTimeout = 10 * time.Minute

// importErrorsShown is how many row errors an import answers with (docs/http-api.md: the first 20).
const importErrorsShown = 20

// Label limits: names like Prometheus label names, values of bounded length, few per device.
const (
	maxLabels     = 32
	maxLabelValue = 256
)

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$`)

// registration is one device's registry request, as PUT's body or one import row.
type registration struct {
	DeviceID   string            `json:"device_id,omitempty"` // import rows only
	DeviceType string            `json:"device_type,omitempty"`
	Timeout    string            `json:"timeout,omitempty"`
	Parent     string            `json:"parent,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// check validates a registration of id and returns what the store records.
func (a *api) check(id string, r registration) (deadline.Registration, error) {
	var reg deadline.Registration
	if !ingest.ValidID(id) {
		return reg, fmt.Errorf("device id %q: 1-256 bytes of UTF-8 without control characters", id)
	}
	if r.DeviceType != "" {
		if a.KnownType == nil || !a.KnownType(r.DeviceType) {
			return reg, fmt.Errorf("device_type %q is not a configured type", r.DeviceType)
		}
		reg.Type = r.DeviceType
	}
	if r.Timeout != "" {
		d, err := time.ParseDuration(r.Timeout)
		if err != nil || d < time.Second || d > 365*24*time.Hour {
			return reg, fmt.Errorf("timeout %q: a duration from 1s to 8760h, such as \"90s\"", r.Timeout)
		}
		reg.TimeoutMs = d.Milliseconds()
	}
	if r.Parent != "" && (!ingest.ValidID(r.Parent) || r.Parent == id) {
		return reg, fmt.Errorf("parent %q: a device id other than the device's own", r.Parent)
	}
	if len(r.Labels) > maxLabels {
		return reg, fmt.Errorf("labels: at most %d", maxLabels)
	}
	for k, v := range r.Labels {
		if !labelName.MatchString(k) {
			return reg, fmt.Errorf("label name %q: a letter or _, then letters, digits, _ . -, at most 64", k)
		}
		if len(v) > maxLabelValue || !utf8.ValidString(v) {
			return reg, fmt.Errorf("label %q: a UTF-8 value of at most %d bytes", k, maxLabelValue)
		}
	}
	reg.Labels = r.Labels
	return reg, nil
}

// putDevice answers PUT /v1/devices/{id}.
func (a *api) putDevice(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body registration
	if !a.decodeBody(w, r, &body) {
		return
	}
	if body.DeviceID != "" && body.DeviceID != id {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("device_id %q differs from the path's %q", body.DeviceID, id))
		return
	}
	reg, err := a.check(id, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	added, err := a.Store.Register(r.Context(), []string{id}, []deadline.Registration{reg}, []string{body.Parent})
	if err != nil {
		a.internal(w, err)
		return
	}
	d, _, err := a.Store.Device(r.Context(), id)
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"device": a.view(d), "expected": added == 1})
}

// importResult is POST /v1/devices:import's answer (docs/http-api.md).
type importResult struct {
	Imported int           `json:"imported"`
	Failed   int           `json:"failed"`
	Errors   []importError `json:"errors"`
}

type importError struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// importDevices answers POST /v1/devices:import: NDJSON rows (application/x-ndjson) or CSV with a header
// row (text/csv), read as a stream and written a batch at a time. A bad row is counted and named (the
// first 20), and the rows around it are imported.
func (a *api) importDevices(w http.ResponseWriter, r *http.Request) {
	media, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var next func() (registration, error)
	switch media {
	case "application/x-ndjson", "application/jsonl", "application/json":
		next = ndjsonRows(r.Body)
	case "text/csv":
		var err error
		if next, err = csvRows(r.Body); err != nil {
			writeError(w, http.StatusBadRequest, "csv: "+err.Error())
			return
		}
	default:
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/x-ndjson or text/csv")
		return
	}
	// A million rows take longer than the server's read and write timeouts allow a request.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(importTimeout))
	_ = rc.SetWriteDeadline(time.Now().Add(importTimeout))
	res := importResult{Errors: []importError{}}
	writes := newImportWriter(r.Context(), a.Store)
	defer writes.wait() // a batch in flight ends with the request, whatever the way out
	fail := func(line int, err error) {
		res.Failed++
		if len(res.Errors) < importErrorsShown {
			res.Errors = append(res.Errors, importError{Line: line, Error: err.Error()})
		}
	}
	for line := 1; ; line++ {
		row, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", tooLarge.Limit))
			return
		}
		if err != nil {
			fail(line, err)
			continue
		}
		reg, err := a.check(row.DeviceID, row)
		if err != nil {
			fail(line, err)
			continue
		}
		if err := writes.add(row.DeviceID, reg, row.Parent); err != nil {
			a.internal(w, err)
			return
		}
	}
	err := writes.flush()
	if err == nil {
		err = writes.wait()
	}
	if err != nil {
		a.internal(w, err)
		return
	}
	res.Imported = writes.written
	a.log.Info("devices imported", zap.Int("imported", res.Imported), zap.Int("failed", res.Failed))
	writeJSON(w, http.StatusOK, res)
}

// maxRowBytes bounds one NDJSON row.
const maxRowBytes = 64 << 10

// ndjsonRows reads one JSON object per line; empty lines are skipped.
func ndjsonRows(body io.Reader) func() (registration, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), maxRowBytes)
	return func() (registration, error) {
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes()) // no copy per row: the decoder reads it before the next Scan
			if len(line) == 0 {
				continue
			}
			var row registration
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&row); err != nil {
				return registration{}, fmt.Errorf("row: %w", err)
			}
			return row, nil
		}
		if err := sc.Err(); err != nil {
			return registration{}, err
		}
		return registration{}, io.EOF
	}
}

// csvRows reads CSV with a header naming its columns: device_id (required), device_type, timeout,
// parent, labels ("name=value;name=value").
func csvRows(body io.Reader) (func() (registration, error), error) {
	cr := csv.NewReader(body)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		switch h {
		case "device_id", "device_type", "timeout", "parent", "labels":
			col[h] = i
		default:
			return nil, fmt.Errorf("header: unknown column %q (device_id, device_type, timeout, parent, labels)", h)
		}
	}
	if _, ok := col["device_id"]; !ok {
		return nil, errors.New("header: no device_id column")
	}
	return func() (registration, error) {
		rec, err := cr.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return registration{}, io.EOF
			}
			var perr *csv.ParseError
			if errors.As(err, &perr) {
				return registration{}, fmt.Errorf("row: %w", err)
			}
			return registration{}, err
		}
		field := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		row := registration{DeviceID: field("device_id"), DeviceType: field("device_type"), Timeout: field("timeout"),
			Parent: field("parent")}
		if l := field("labels"); l != "" {
			row.Labels = map[string]string{}
			for _, pair := range strings.Split(l, ";") {
				k, v, ok := strings.Cut(pair, "=")
				if !ok {
					return registration{}, fmt.Errorf("labels %q: name=value;name=value", l)
				}
				row.Labels[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		return row, nil
	}, nil
}

// labelFilter parses the listing's label=name=value parameter.
func labelFilter(v string) (name, value string, err error) {
	name, value, ok := strings.Cut(v, "=")
	if !ok || !labelName.MatchString(name) {
		return "", "", fmt.Errorf("label must be name=value, got %q", v)
	}
	return name, value, nil
}

// withLabel keeps the devices of page registered with label name=value.
func (a *api) withLabel(ctx context.Context, page []deadline.Device, name, value string) ([]deadline.Device, error) {
	ids := make([]string, len(page))
	for i, d := range page {
		ids[i] = d.ID
	}
	labels, err := a.Store.Labels(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := page[:0]
	for i, d := range page {
		if v, ok := labels[i][name]; ok && v == value {
			out = append(out, d)
		}
	}
	return out, nil
}

// importPath is the import's path: its body may be larger than other requests' (api.auth).
const importPath = "/v1/devices:import"
