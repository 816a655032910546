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

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ident"
)

// The device registry (docs/http-api.md, "Device registry"): PUT /v1/devices/{id} registers one device,
// POST /v1/devices:import many. A registered device that never signals alarms at registration + its
// timeout; a per-device timeout overrides its type's from its next signal; labels serve correlation
// (labels.<name>) and the listing filter. PUT replaces the registration: a field left out is cleared,
// except the parent, which signals may name too and stays until named anew.

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

// idError is a registration's id, parent or type name breaking the id rule (internal/ident): counted as
// bad input (badID).
type idError struct{ msg string }

func (e idError) Error() string { return e.msg }

// checkID is nil when s, the value of field (device id, parent, device_type), follows the id rule, the
// one every way in applies (internal/ident), else an idError saying why. The id is quoted escaped, so an
// error never shows an invisible character's trick.
func checkID(field, s string) error {
	if p := ident.Problem(s); p != "" {
		return idError{fmt.Sprintf("%s %q %s", field, s, p)}
	}
	return nil
}

// check validates a registration of id and returns what the store records.
func (a *api) check(id string, r registration) (deadline.Registration, error) {
	var reg deadline.Registration
	if err := checkID("device id", id); err != nil {
		return reg, err
	}
	if r.DeviceType != "" {
		if err := checkID("device_type", r.DeviceType); err != nil {
			return reg, err
		}
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
	if r.Parent != "" {
		if err := checkID("parent", r.Parent); err != nil {
			return reg, err
		}
		if r.Parent == id {
			return reg, fmt.Errorf("parent %q: a device id other than the device's own", r.Parent)
		}
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
		a.refuseRow(w, err)
		return
	}
	added, refused, err := a.Store.Register(r.Context(), []string{id}, []deadline.Registration{reg}, []string{body.Parent})
	if len(refused) > 0 {
		err = deadline.ErrTypesFull
	}
	if err != nil {
		a.registerFailed(w, err)
		return
	}
	d, _, err := a.Store.Device(r.Context(), id)
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"device": a.view(d), "expected": added == 1})
}

// countBadRow counts a registration check failed as bad input when it is an id's (idError).
func (a *api) countBadRow(err error) {
	var bad idError
	if errors.As(err, &bad) {
		a.badInput.WithLabelValues(badID).Inc()
	}
}

// refuseRow answers 400 for a registration check failed, counting it (countBadRow).
func (a *api) refuseRow(w http.ResponseWriter, err error) {
	a.countBadRow(err)
	writeError(w, http.StatusBadRequest, err.Error())
}

// importResult is POST /v1/devices:import's answer (docs/http-api.md).
type importResult struct {
	Imported int           `json:"imported"`
	Failed   int           `json:"failed"`
	Errors   []importError `json:"errors"`
}

// fail counts a row that failed at line, keeping the first importErrorsShown of their errors.
func (r *importResult) fail(line int, err error) {
	r.Failed++
	if len(r.Errors) < importErrorsShown {
		r.Errors = append(r.Errors, importError{Line: line, Error: err.Error()})
	}
}

type importError struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// importDevices answers POST /v1/devices:import: NDJSON rows (application/x-ndjson) or CSV with a header
// row (text/csv), read as a stream and written a batch at a time. A bad row is counted and named (the
// first 20), and the rows around it are imported. What cannot be read on from stops the import: a line
// longer than a row may be answers 400 naming it, with what was imported before it; a body that cannot
// be read (the client gone) or a request that ended stops it between two rows.
func (a *api) importDevices(w http.ResponseWriter, r *http.Request) {
	media, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body := &lineLimit{r: r.Body, max: maxRowBytes}
	var next func() (registration, int, error)
	switch media {
	case "application/x-ndjson", "application/jsonl", "application/json":
		next = ndjsonRows(body)
	case "text/csv":
		var err error
		if next, err = csvRows(body); err != nil {
			var long *lineTooLongError
			if errors.As(err, &long) {
				a.refuse(w, badImport, long.Error())
				return
			}
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
	ctx := r.Context()
	res := importResult{Errors: []importError{}}
	writes := newImportWriter(ctx, a.Store)
	defer writes.wait() // a batch in flight ends with the request, whatever the way out
	for {
		if ctx.Err() != nil {
			a.importEnded(w, ctx, res.Failed, writes)
			return
		}
		row, line, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		var (
			tooLarge *http.MaxBytesError
			bad      *rowError
			long     *lineTooLongError
		)
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", tooLarge.Limit))
			return
		case errors.As(err, &long):
			a.importStopped(w, long, res, writes)
			return
		case errors.As(err, &bad):
			res.fail(line, bad.err)
			continue
		case err != nil: // the body cannot be read on: the client went away, or its connection broke
			a.log.Warn("import ended: its body could not be read", zap.Int("line", line), zap.Error(err))
			a.importEnded(w, ctx, res.Failed, writes)
			return
		}
		reg, err := a.check(row.DeviceID, row)
		if err != nil {
			a.countBadRow(err)
			res.fail(line, err)
			continue
		}
		if err := writes.add(line, row.DeviceID, reg, row.Parent); err != nil {
			a.registerFailed(w, err)
			return
		}
	}
	if err := writes.finish(); err != nil {
		a.registerFailed(w, err)
		return
	}
	a.failRefused(writes, &res)
	res.Imported = writes.written
	a.log.Info("devices imported", zap.Int("imported", res.Imported), zap.Int("failed", res.Failed))
	writeJSON(w, http.StatusOK, res)
}

// registerFailed answers a registration the store could not write: 507 when the type registry has no
// index left for its own timeout (counted, the message says what to do), else an internal error.
func (a *api) registerFailed(w http.ResponseWriter, err error) {
	if errors.Is(err, deadline.ErrTypesFull) {
		a.badInput.WithLabelValues(badTypesFull).Inc()
		writeError(w, http.StatusInsufficientStorage, err.Error()+
			"; register devices with timeouts already in use, or delete devices' own timeouts no longer needed")
		return
	}
	a.internal(w, err)
}

// failRefused reports the rows the store refused because their own timeout needed a type index and none
// was left: each a failed row, counted as types_full, the rows around it written.
func (a *api) failRefused(writes *importWriter, res *importResult) {
	for _, line := range writes.refused {
		a.badInput.WithLabelValues(badTypesFull).Inc()
		res.fail(line, fmt.Errorf("%w; register it with a timeout already in use, or delete own timeouts no longer needed", deadline.ErrTypesFull))
	}
	writes.refused = nil
}

// importStopped answers an import stopped by a line too long to be a row: 400 naming the line, with
// what the rows before it did (they are written; nothing from the line on is read).
func (a *api) importStopped(w http.ResponseWriter, long *lineTooLongError, res importResult, writes *importWriter) {
	if err := writes.finish(); err != nil {
		a.registerFailed(w, err)
		return
	}
	a.failRefused(writes, &res)
	res.Imported = writes.written
	a.badInput.WithLabelValues(badImport).Inc()
	a.log.Info("import stopped at a line too long", zap.Int("line", long.line), zap.Int("imported", res.Imported),
		zap.Int("failed", res.Failed))
	writeJSON(w, http.StatusBadRequest, importStoppedAnswer{Error: long.Error(), Line: long.line, importResult: res})
}

// importStoppedAnswer is the 400 of an import stopped at a line: the error and its line, and the result
// of the rows before it.
type importStoppedAnswer struct {
	Error string `json:"error"`
	Line  int    `json:"line"`
	importResult
}

// importEnded ends an import whose request ended, or whose body could not be read on: the batch in
// flight is waited for (the deferred wait), the rows not yet sent are dropped, and the answer, should
// anyone still read it, says how far it got.
func (a *api) importEnded(w http.ResponseWriter, ctx context.Context, failed int, writes *importWriter) {
	_ = writes.wait()
	a.log.Info("import ended before its body did", zap.Int("imported", writes.written), zap.Int("failed", failed),
		zap.NamedError("request", ctx.Err()))
	writeError(w, http.StatusServiceUnavailable, fmt.Sprintf(
		"the request ended before its body was read: %d rows were imported, the rest not; send the import again (a row imported twice is registered once)",
		writes.written))
}

// maxRowBytes bounds one line of an import, a row of NDJSON or CSV: a registration with 32 labels of 256
// bytes fits in well under half of it.
const maxRowBytes = 64 << 10

// rowError is a row that could not be read as one (bad JSON, a CSV field count off): the import names it
// and reads on.
type rowError struct{ err error }

func (e *rowError) Error() string { return e.err.Error() }

// lineTooLongError is a line of an import longer than maxRowBytes: the import stops there.
type lineTooLongError struct{ line, max int }

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("line %d: longer than %d bytes, which no row is; send one registration a line (NDJSON: one JSON object per line, not a JSON array); the import stopped there",
		e.line, e.max)
}

// lineLimit reads an import's body and fails with a lineTooLongError once a line runs longer than max
// bytes without a newline: neither bufio.Scanner (whose error would come back for every call) nor
// encoding/csv (which would grow its buffer to the body's limit) stops there by itself.
type lineLimit struct {
	r    io.Reader
	max  int
	run  int // bytes read since the last newline
	line int // the line being read, from 1
	err  error
}

func (l *lineLimit) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p)
	for i := 0; i < n; {
		nl := bytes.IndexByte(p[i:n], '\n')
		if nl < 0 {
			nl = n - i // the line goes on past what was read
		}
		if l.run+nl > l.max {
			l.err = &lineTooLongError{line: l.line + 1, max: l.max}
			return i + l.max - l.run, l.err // the line's first max bytes, none beyond
		}
		if i += nl; i < n { // at the newline
			l.run = 0
			l.line++
			i++
		} else {
			l.run += nl
		}
	}
	return n, err
}

// ndjsonRows reads one JSON object per line; empty lines are skipped. Lines count from 1, blank ones too.
func ndjsonRows(body *lineLimit) func() (registration, int, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), maxRowBytes+2) // room for the line's \r\n; lineLimit bounds the line
	line := 0
	return func() (registration, int, error) {
		for sc.Scan() {
			line++
			var long *lineTooLongError
			if errors.As(body.err, &long) && long.line == line {
				return registration{}, line, long // the start of the line too long, handed over by the scanner
			}
			row := bytes.TrimSpace(sc.Bytes()) // no copy per row: the decoder reads it before the next Scan
			if len(row) == 0 {
				continue
			}
			if row[0] == '[' {
				return registration{}, line, &rowError{errors.New("row: a JSON array; send one JSON object per line (NDJSON)")}
			}
			var reg registration
			dec := json.NewDecoder(bytes.NewReader(row))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&reg); err != nil {
				return registration{}, line, &rowError{fmt.Errorf("row: %w", err)}
			}
			if dec.More() {
				return registration{}, line, &rowError{errors.New("row: more than one JSON value; send one JSON object per line (NDJSON)")}
			}
			return reg, line, nil
		}
		if err := sc.Err(); err != nil {
			return registration{}, line + 1, err
		}
		return registration{}, line, io.EOF
	}
}

// csvRows reads CSV with a header naming its columns: device_id (required), device_type, timeout,
// parent, labels ("name=value;name=value"). A row's line is where its record starts, the header's being 1.
func csvRows(body io.Reader) (func() (registration, int, error), error) {
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
	return func() (registration, int, error) {
		rec, err := cr.Read()
		if err != nil {
			var perr *csv.ParseError // the CSV's own errors; the body's come as they are
			if errors.As(err, &perr) {
				return registration{}, perr.StartLine, &rowError{fmt.Errorf("row: %w", err)}
			}
			return registration{}, 0, err // io.EOF, or the body cannot be read on
		}
		line, _ := cr.FieldPos(0)
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
					return registration{}, line, &rowError{fmt.Errorf("labels %q: name=value;name=value", l)}
				}
				row.Labels[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		return row, line, nil
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
	labels, err := a.Store.Registry().Labels(ctx, ids)
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
