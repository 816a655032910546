package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// The HTTP signal routes (docs/http-api.md#signals) hand every signal to the ingest chain as source
// http, so decoding, late signals, batching, write health and dead letters are the MQTT and Kafka
// sources' own; the request waits for the chain's acknowledgement instead of a broker.

// signalsPath is the batch route, whose body may be larger than the API's other bodies.
const signalsPath = "/v1/signals"

// defaultSignalWait bounds how long a signal request waits for Redis to store its signals: past it the
// request answers 503 (the client sends again; a signal sent twice moves nothing back), so a Redis
// outage never holds requests, and their goroutines, for good.
const defaultSignalWait = 10 * time.Second

// maxBatchesRead bounds the batch requests being submitted at once: each holds its body, up to
// ingest.MaxBatchBytes, until the chain took every signal of it (which waits while Redis is slow); the
// others wait (within the signal wait) for their turn. A request takes its turn once its body is read,
// never before: a client trickling its body would otherwise hold a turn for as long as it trickles, and
// maxBatchesRead of them would keep every other device's signals out. A body being read holds what has
// arrived of it, for at most the server's read timeout.
const maxBatchesRead = 4

// reasonOutsideScope is the bad reason of a signal for a device a scoped token may not signal. It is
// not bad input: it is not dead-lettered, it is counted as a refusal (heartbeatd_api_refused_total).
const reasonOutsideScope = "outside_scope"

// badSignal is one signal of a batch that was not accepted.
type badSignal struct {
	Index  int    `json:"index"`
	Reason string `json:"reason"`
}

// pendingAcks counts a request's signals not yet acknowledged by the chain; done closes at zero. It
// starts at one for the request itself, so it cannot close while signals are still being submitted.
type pendingAcks struct {
	left atomic.Int64
	done chan struct{}
}

func newPendingAcks() *pendingAcks {
	p := &pendingAcks{done: make(chan struct{})}
	p.left.Store(1)
	return p
}

func (p *pendingAcks) add() { p.left.Add(1) }

func (p *pendingAcks) ack() {
	if p.left.Add(-1) == 0 {
		close(p.done)
	}
}

// waitAcks waits until every submitted signal was acknowledged (stored, or its dead letter handled); on
// failure it says why, for a 503.
func (a *api) waitAcks(ctx context.Context, p *pendingAcks) error {
	p.ack() // the request's own count: everything is submitted
	select {
	case <-p.done:
		return nil
	case <-a.Signals.Done():
		return errors.New("heartbeatd is shutting down; send the signals again to another replica or after its restart")
	case <-ctx.Done():
		return a.notStored(ctx)
	}
}

// notStored says why signals were not stored in time.
func (a *api) notStored(ctx context.Context) error {
	why := "Redis did not store the signals within " + a.SignalWait.String()
	if f := a.Signals.WriteFailure(); f != nil {
		why += ": " + f.Err.Error()
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		why = "the request ended before its signals were stored"
	}
	return errors.New(why + "; send them again (a signal sent twice moves nothing back)")
}

// postSignals is POST /v1/signals: a batch, answered once Redis stored its valid signals.
func (a *api) postSignals(w http.ResponseWriter, r *http.Request) {
	if a.Signals == nil {
		writeError(w, http.StatusServiceUnavailable, "this process takes no signals over HTTP")
		return
	}
	if r.ContentLength > ingest.MaxBatchBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes; send at most %d signals or %d bytes a request",
			ingest.MaxBatchBytes, ingest.MaxBatchSignals, ingest.MaxBatchBytes))
		return
	}
	// The body first, then a turn (maxBatchesRead): a slow body holds no turn while it is read.
	batch, err := ingest.ReadBatch(r.Body, ingest.MaxBatchSignals)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, ingest.ErrTooManySignals):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: more than %d signals; nothing was stored: send at most %d a request",
			ingest.MaxBatchSignals, ingest.MaxBatchSignals))
		return
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes; nothing was stored: send at most %d bytes a request",
			ingest.MaxBatchBytes, ingest.MaxBatchBytes))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.SignalWait)
	defer cancel()
	select {
	case a.batchesRead <- struct{}{}:
	case <-ctx.Done():
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("busy: %d other batches were being taken in for %s (Redis slow or down); send it again",
			maxBatchesRead, a.SignalWait))
		return
	}
	release := sync.OnceFunc(func() { <-a.batchesRead })
	defer release()
	refused, err := a.outsideScope(ctx, callerOf(r).Scope, batch)
	if err != nil {
		a.internal(w, err)
		return
	}
	bad := []badSignal{}
	pending := newPendingAcks()
	accepted := 0
	for i := range batch.Len() {
		if len(refused) > 0 && refused[0].Index == i {
			bad, refused = append(bad, refused[0]), refused[1:]
			continue
		}
		pending.add()
		reason, err := a.Signals.Offer(ctx, ingest.Message{Source: ingest.SourceHTTP, Topic: signalsPath,
			Payload: batch.Signal(i), ObjectOnly: true, Ack: pending.ack})
		if err != nil {
			a.signalsNotTaken(ctx, w, err)
			return
		}
		if reason != "" {
			bad = append(bad, badSignal{Index: i, Reason: reason})
			continue
		}
		accepted++
	}
	release() // the chain holds what it needs of the body: its turn goes to the next batch
	if err := a.waitAcks(ctx, pending); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"accepted": accepted, "bad": bad})
}

// signalsNotTaken answers a request whose signals the chain did not take (stopped, or the wait ended
// while it was full).
func (a *api) signalsNotTaken(ctx context.Context, w http.ResponseWriter, err error) {
	if errors.Is(err, ingest.ErrChainStopped) {
		writeError(w, http.StatusServiceUnavailable, "heartbeatd is shutting down; send the signals again")
		return
	}
	writeError(w, http.StatusServiceUnavailable, a.notStored(ctx).Error())
}

// outsideScope lists the signals of batch a scoped token may not send: those of devices unknown or
// outside its scope, or naming a type outside it. A label scope is judged by the devices' registered
// labels, read for the whole batch at once (only a registered device has them, so it is known); a
// type scope reads each distinct device once.
func (a *api) outsideScope(ctx context.Context, scope config.Scope, batch *ingest.Batch) ([]badSignal, error) {
	if scope.Whole() {
		return nil, nil
	}
	devices := make([]string, batch.Len()) // "" for a signal decode refuses: the chain dead-letters it
	types := make([]string, batch.Len())
	known := map[string]bool{} // a batch often signals one device many times
	var distinct []string
	for i := range batch.Len() {
		m := ingest.Message{Source: ingest.SourceHTTP, Payload: batch.Signal(i), ObjectOnly: true}
		device, typ, reason := ingest.Identify(&m)
		if reason != "" {
			continue
		}
		devices[i], types[i] = device, typ
		if _, ok := known[device]; !ok {
			known[device] = false
			distinct = append(distinct, device)
		}
	}
	if err := a.judgeScope(ctx, scope, distinct, known); err != nil {
		return nil, err
	}
	var bad []badSignal
	for i, device := range devices {
		if device != "" && (!known[device] || !typeInScope(scope, types[i])) {
			a.refused.WithLabelValues(refusedScope).Inc()
			bad = append(bad, badSignal{Index: i, Reason: reasonOutsideScope})
		}
	}
	return bad, nil
}

// judgeScope sets in[d] for each of devices: known and inside scope.
func (a *api) judgeScope(ctx context.Context, scope config.Scope, devices []string, in map[string]bool) error {
	if scope.Type == "" {
		labels, err := a.Store.Registry().Labels(ctx, devices)
		if err != nil {
			return err
		}
		for i, d := range devices {
			in[d] = labels[i] != nil && scope.Matches("", labels[i])
		}
		return nil
	}
	for _, d := range devices {
		ok, err := a.inScope(ctx, scope, d)
		if err != nil {
			return err
		}
		in[d] = ok
	}
	return nil
}

// typeInScope reports whether a signal naming typ ("" = none) keeps its device in scope.
func typeInScope(scope config.Scope, typ string) bool {
	return scope.Type == "" || typ == "" || typ == scope.Type
}

// postDeviceSignal is POST /v1/devices/{id}/signal: one signal for the device the path names, with an
// optional body (a signal object, or any bytes as for MQTT), answered 204 once Redis stored it.
func (a *api) postDeviceSignal(w http.ResponseWriter, r *http.Request) {
	if a.Signals == nil {
		writeError(w, http.StatusServiceUnavailable, "this process takes no signals over HTTP")
		return
	}
	id := r.PathValue("id")
	body, err := io.ReadAll(io.LimitReader(r.Body, ingest.MaxPayload+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || len(body) > ingest.MaxPayload:
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: a signal is at most %d bytes", min(ingest.MaxPayload, a.MaxBodySize)))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	m := ingest.Message{Source: ingest.SourceHTTP, Topic: r.URL.Path, Device: id, Payload: body}
	if scope := callerOf(r).Scope; !scope.Whole() {
		if _, typ, reason := ingest.Identify(&m); reason == "" && !typeInScope(scope, typ) {
			a.refused.WithLabelValues(refusedScope).Inc()
			writeError(w, http.StatusForbidden, fmt.Sprintf("type %q is outside this token's scope (%s)", typ, scope))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.SignalWait)
	defer cancel()
	pending := newPendingAcks()
	pending.add()
	m.Ack = pending.ack
	reason, err := a.Signals.Offer(ctx, m)
	if err != nil {
		a.signalsNotTaken(ctx, w, err)
		return
	}
	if err := a.waitAcks(ctx, pending); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if reason != "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad signal (%s): dead-lettered, see docs/signals.md#bad-input", reason))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
