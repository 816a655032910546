package alarm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/flaps"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// SilenceChecker answers whether a device is silenced; internal/silence's *Silences is one.
type SilenceChecker interface {
	SilencedUntil(device, typ string, now time.Time) time.Time
}

// FactsChecker is a SilenceChecker whose silences may match on labels and parents (internal/silence's is):
// while NeedsFacts, the handler reads them for its claims, one round trip each per batch.
type FactsChecker interface {
	NeedsFacts() bool
	SilencedUntilFacts(f silence.Facts, now time.Time) time.Time
}

// HandlerOptions configures a Handler.
type HandlerOptions struct {
	Store *deadline.Store
	Sink  event.Sink
	// Policies returns the current policy snapshot; a reload swaps it, and each claim reads it once, so
	// a changed interval applies at every device's next act time.
	Policies func() *config.Policies
	Silences SilenceChecker // nil = no silences
	// MaxPublishAttempts: a claim whose events Kafka refused this often in a row for their content is
	// parked (default 10). Other failures are retried for as long as they last (failedAck).
	MaxPublishAttempts int
	// Refused tells a publish error for an event Kafka refused for its content (too large, invalid)
	// from one that says nothing about the event (Kafka down, slow, short of replicas); the Kafka
	// publisher's is kafka.Refused. nil: every failure is retried, nothing is ever parked.
	Refused func(error) bool
	// ParentWait is how long past its parent's deadline a child waits for the parent's verdict
	// (detection.parent_wait).
	ParentWait time.Duration
	// Lease is how long the suppressions a parent's wake commits stay in flight (detection.lease), as a
	// claim's (default config.DefaultLease).
	Lease time.Duration
	// Correlator groups interruptions into outages; nil = correlation off.
	Correlator *correlate.Correlator
	// Timeout bounds one batch's publish and acknowledge; the batch is finished even when the scanner is
	// stopping, so a graceful stop does not leave claims for the lease to return (default 15s).
	Timeout time.Duration
	Now     func() time.Time
	Logger  *zap.Logger
	Metrics *Metrics // nil = none
}

// Handler turns a wake-up's claims into events: re-check, decide, publish the batch, then acknowledge
// in Redis. Its Handle is scan.ScannerOptions.Handle.
type Handler struct {
	opts HandlerOptions
	log  *zap.Logger
	// beforeAck, when set (tests), runs after publishing; returning false stops there like a crash.
	beforeAck func() bool
}

// NewHandler returns a handler.
func NewHandler(opts HandlerOptions) *Handler {
	if opts.MaxPublishAttempts <= 0 {
		opts.MaxPublishAttempts = config.DefaultMaxPublishAttempts
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	if opts.Lease <= 0 {
		opts.Lease = config.DefaultLease
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Refused == nil {
		opts.Refused = func(error) bool { return false }
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &Handler{opts: opts, log: opts.Logger.With(zap.String("component", "alarm"))}
}

// errCrashed is what a test-stopped handler returns.
var errCrashed = errors.New("alarm: stopped between publish and acknowledge")

// maxWakeDepth bounds how many generations below a claim's device one Handle commits in a chain of
// parents (a gateway behind a gateway): past it, the children are left due for the scanner.
const maxWakeDepth = 4

// Handle processes one wake-up's claims. An error leaves the claims leased: they come back when the
// lease runs out and are published again with the same event ids (at-least-once).
func (h *Handler) Handle(ctx context.Context, claims []deadline.Claim) error {
	return h.handle(ctx, claims, 0)
}

// handle is Handle for claims depth generations below the wake-up's: the suppressions a verdict's wake
// commits are handled at once, by the process that has the verdict, instead of a claim after it.
func (h *Handler) handle(ctx context.Context, claims []deadline.Claim, depth int) error {
	if len(claims) == 0 {
		return nil
	}
	// The wake below may hand over thousands of committed children, each chunk a batch with its own
	// timeout: it is bounded by the caller's context (shutdown), not by this batch's.
	wakeCtx := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.Timeout)
	defer cancel()
	m := h.opts.Metrics
	m.ClaimsPending.Add(float64(len(claims)))
	defer m.ClaimsPending.Sub(float64(len(claims)))

	inputs, decisions, err := h.decideAll(ctx, claims)
	if err != nil {
		return err
	}
	claims, inputs, decisions = h.dropLapsed(claims, inputs, decisions)
	events, owner, failed := h.publish(ctx, claims, decisions)
	if h.beforeAck != nil && !h.beforeAck() {
		return errCrashed
	}
	ackNow := h.opts.Now()
	acks, retried, retryErr := h.acks(claims, decisions, failed, ackNow)
	if _, err := h.opts.Store.Settle(ctx, acks, deadline.RecordsOf(claims)); err != nil {
		return fmt.Errorf("alarm: acknowledge: %w", err)
	}

	// After the acknowledgement, so the woken children read their parent's new state. A crash or a stop
	// before it leaves them to their bounds: the parent's deadline + parent_wait, or parentRecheck; the
	// suppressions it committed and did not release come back after the lease.
	if err := h.wakeChildren(wakeCtx, claims, decisions, failed, ackNow, depth); err != nil {
		h.log.Warn("waking the children of interrupted or recovered devices failed; they look again within their bounds",
			zap.Error(err))
	}
	h.recordFlaps(ctx, claims, decisions, failed)
	if err := h.opts.Store.PinSeen(ctx, seenPins(claims, inputs, decisions, failed)); err != nil {
		// The next claim falls back to the latest signal, the same one unless the device signalled since.
		h.log.Warn("pinning the last signal before incidents of scheduled types failed", zap.Error(err))
	}
	if retried > 0 {
		h.log.Warn("publishing failed; the claims stay leased and are retried until Kafka takes them",
			zap.Int("claims", retried), zap.Duration("retry_within", PublishBackoffMax), zap.Error(retryErr))
	}
	h.countPublished(events, owner, failed)
	return nil
}

// dropLapsed leaves out the claims whose lease runs out within a quarter of a lease (the replica stalled,
// or Redis or Kafka was slow, since they were claimed): another replica may claim them meanwhile and
// decide afresh, say `recovered` where this one would still send the repeat it decided. Neither their
// events nor their acknowledgements go out; their lease returns them, to whichever replica claims first.
// Claims of an in-flight record are kept: the record hands them out again under the same event ids.
func (h *Handler) dropLapsed(claims []deadline.Claim, inputs []input, decisions []decision) ([]deadline.Claim, []input, []decision) {
	limit := h.opts.Now().Add(h.opts.Lease / 4)
	kept := 0
	for i, c := range claims {
		if c.Record == "" && !c.LeasedUntil.IsZero() && !limit.Before(c.LeasedUntil) {
			continue
		}
		claims[kept], inputs[kept], decisions[kept] = c, inputs[i], decisions[i]
		kept++
	}
	if dropped := len(claims) - kept; dropped > 0 {
		h.opts.Metrics.LapsedClaims.Add(float64(dropped))
		h.log.Warn("claims whose lease was running out left to their next claim", zap.Int("claims", dropped))
	}
	return claims[:kept], inputs[:kept], decisions[:kept]
}

// decideAll re-checks each claim against Redis, gathers what decide needs (parents, outages, policies,
// flap history, silences) and decides every claim; the outages it opens or joins are judged last.
func (h *Handler) decideAll(ctx context.Context, claims []deadline.Claim) ([]input, []decision, error) {
	current, err := h.opts.Store.CurrentDeadlines(ctx, claims)
	if err != nil {
		return nil, nil, fmt.Errorf("alarm: re-check: %w", err)
	}
	parents, parentNames, err := h.parents(ctx, claims)
	if err != nil {
		return nil, nil, fmt.Errorf("alarm: parents: %w", err)
	}
	groups, outages, err := h.outages(ctx, claims, parentNames)
	if err != nil {
		return nil, nil, fmt.Errorf("alarm: correlation: %w", err)
	}
	now := h.opts.Now()
	policies := h.opts.Policies()
	pols := make([]config.Policy, len(claims))
	for i, c := range claims {
		pol, _ := policies.Lookup(c.Type)
		pols[i] = pol.WithOwnTimeout(c.OwnTimeout)
	}
	flaps, err := h.flapHistory(ctx, claims, pols)
	if err != nil {
		return nil, nil, fmt.Errorf("alarm: flapping: %w", err)
	}
	seen, err := h.seenTimes(ctx, claims, pols)
	if err != nil {
		return nil, nil, fmt.Errorf("alarm: signal times: %w", err)
	}
	silenced, err := h.silencedUntil(ctx, claims, now)
	if err != nil {
		return nil, nil, fmt.Errorf("alarm: silences: %w", err)
	}
	announcing, err := h.announcing(ctx, claims)
	if err != nil {
		return nil, nil, fmt.Errorf("alarm: acks announced: %w", err)
	}
	inputs := make([]input, len(claims))
	decisions := make([]decision, len(claims))
	for i, c := range claims {
		in := input{Claim: c, Current: current[i], Now: now, Policy: pols[i], Announcing: announcing[i]}
		in.SilencedUntil = silenced[i]
		in.Parent, in.ParentWait, in.OutageID, in.Flaps, in.Seen = parents[i], h.opts.ParentWait, outages[i], flaps[i], seen[i]
		inputs[i] = in
		decisions[i] = decide(in)
	}
	if err := h.judgeOutages(ctx, inputs, decisions, groups, now); err != nil {
		return nil, nil, fmt.Errorf("alarm: correlation: %w", err)
	}
	return inputs, decisions, nil
}

// announcing reads, for the acked incidents among claims only (few: an acked incident is claimed when
// its device signals), whether their ack is still being announced.
func (h *Handler) announcing(ctx context.Context, claims []deadline.Claim) ([]bool, error) {
	out := make([]bool, len(claims))
	var acked []deadline.Claim
	var at []int
	for i, c := range claims {
		if c.State.Acked {
			acked, at = append(acked, c), append(at, i)
		}
	}
	if len(acked) == 0 {
		return out, nil
	}
	pending, err := h.opts.Store.ActsPending(ctx, acked)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = pending[j]
	}
	return out, nil
}

// publish hands every decided event to the sink as one batch. owner[j] is the claim index of events[j];
// failed[i] is the first error of claim i's events, nil when Kafka took them all.
func (h *Handler) publish(ctx context.Context, claims []deadline.Claim, decisions []decision) (events []event.Event, owner []int, failed []error) {
	events = make([]event.Event, 0, len(claims)) // about one per claim; an Event is large to copy on growth
	owner = make([]int, 0, len(claims))
	for i := range claims {
		for _, e := range decisions[i].Events {
			events = append(events, e)
			owner = append(owner, i)
		}
	}
	failed = make([]error, len(claims))
	if len(events) > 0 {
		for j, err := range h.opts.Sink.Publish(ctx, events) {
			if err != nil && failed[owner[j]] == nil {
				failed[owner[j]] = err
			}
		}
	}
	return events, owner, failed
}

// acks are the acknowledgements of the claims: each decision's own, or a failed publish's (retry, or
// park one Kafka refused too often). retried counts the claims left to retry and retryErr is the last
// of their errors, for one log line per wake-up.
func (h *Handler) acks(claims []deadline.Claim, decisions []decision, failed []error, now time.Time) (acks []deadline.Ack, retried int, retryErr error) {
	for i, c := range claims {
		if err := failed[i]; err != nil {
			refused := h.opts.Refused(err)
			a := failedAck(c, err, refused, h.opts.MaxPublishAttempts, now)
			acks = append(acks, a)
			h.opts.Metrics.PublishFailures.Inc()
			if a.Op == deadline.Park {
				h.log.Error("Kafka refused the events of a claim too often; parked (see /v1/stats, POST /v1/dead/requeue)",
					zap.String("device_id", c.Device), zap.Int("failures", a.State.Failures), zap.Error(err))
				continue
			}
			// One line per wake-up, not per claim: an outage fails every claim, and it may last long.
			retried++
			retryErr = err
			continue
		}
		// decide decided; this only carries it out. A committed decision is already stored: releasing
		// the claim's record acknowledges it.
		if !decisions[i].Committed {
			acks = append(acks, decisions[i].Ack)
		}
	}
	return acks, retried, retryErr
}

// recordFlaps stores the interruption times of the claims whose events went out, for flapping
// detection; a failure only costs a late flapping event, so it is logged.
func (h *Handler) recordFlaps(ctx context.Context, claims []deadline.Claim, decisions []decision, failed []error) {
	var flapUpdates []flaps.Update
	for i, d := range decisions {
		if d.Flaps != nil && failed[i] == nil {
			flapUpdates = append(flapUpdates, flaps.Update{Device: claims[i].Device, Slot: claims[i].Slot, Times: d.Flaps})
		}
	}
	if err := h.opts.Store.Flaps().Record(ctx, flapUpdates); err != nil {
		h.log.Warn("recording interruptions for flapping detection failed", zap.Error(err))
	}
}

// countPublished counts the events Kafka took, and the lateness of each interruption among them.
func (h *Handler) countPublished(events []event.Event, owner []int, failed []error) {
	m := h.opts.Metrics
	for j, e := range events {
		if failed[owner[j]] != nil {
			continue
		}
		m.Events.WithLabelValues(string(e.Kind)).Inc()
		if e.Kind == event.Interrupted {
			m.Lateness.Observe(e.At.Sub(e.Deadline).Seconds())
		}
	}
}

// parents returns, per claim, its device's parent when the parent may explain the silence: for an
// incident with nothing reported yet, or one held under its parent; nil elsewhere. names are the
// parents' ids, also of the other claims when correlation groups by parent. Nothing is read in a fleet
// without parents (deadline.Store.ParentsOf).
func (h *Handler) parents(ctx context.Context, claims []deadline.Claim) ([]*deadline.Parent, []string, error) {
	out := make([]*deadline.Parent, len(claims))
	all := h.opts.Correlator.WantsParents()
	names := make([]string, len(claims))
	var idx []int
	var devices []string
	for i, c := range claims {
		switch {
		case c.WokenBy != "": // a committed suppression names the parent that woke it
			names[i] = c.WokenBy
		case all || mayBeHeld(c.State):
			idx = append(idx, i)
			devices = append(devices, c.Device)
		}
	}
	found, err := h.opts.Store.Links().ParentsOf(ctx, devices)
	if err != nil {
		return nil, nil, err
	}
	for j, p := range found {
		names[idx[j]] = p
	}
	var ids []string
	seen := map[string]bool{}
	for i, p := range names {
		if p != "" && !seen[p] && mayBeHeld(claims[i].State) {
			seen[p] = true
			ids = append(ids, p)
		}
	}
	if len(ids) == 0 {
		return out, names, nil
	}
	views, err := h.opts.Store.Parents(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	shared := make(map[string]*deadline.Parent, len(ids)) // one per parent: a storm's children share a few
	for _, p := range ids {
		v := views[p]
		shared[p] = &v
	}
	for i, p := range names {
		if p != "" && mayBeHeld(claims[i].State) {
			out[i] = shared[p]
		}
	}
	return out, names, nil
}

// flapHistory reads the interruption history of the claims whose type detects flapping.
func (h *Handler) flapHistory(ctx context.Context, claims []deadline.Claim, pols []config.Policy) ([][]int64, error) {
	want := make([]bool, len(claims))
	any := false
	for i, c := range claims {
		want[i] = pols[i].Flapping.Count > 0 && !c.State.Acked && !c.State.Exhausted
		any = any || want[i]
	}
	if !any {
		return make([][]int64, len(claims)), nil
	}
	devices := make([]flaps.Device, len(claims))
	for i, c := range claims {
		devices[i] = flaps.Device{ID: c.Device, Slot: c.Slot}
	}
	return h.opts.Store.Flaps().History(ctx, devices, want)
}

// silencedUntil asks the silences about each claim's device, with its parent and labels when some
// silence matches on them.
func (h *Handler) silencedUntil(ctx context.Context, claims []deadline.Claim, now time.Time) ([]time.Time, error) {
	out := make([]time.Time, len(claims))
	if h.opts.Silences == nil {
		return out, nil
	}
	fc, ok := h.opts.Silences.(FactsChecker)
	if !ok || !fc.NeedsFacts() {
		for i, c := range claims {
			out[i] = h.opts.Silences.SilencedUntil(c.Device, c.Type, now)
		}
		return out, nil
	}
	devices := make([]string, len(claims))
	for i, c := range claims {
		devices[i] = c.Device
	}
	parents, err := h.opts.Store.Links().ParentsOf(ctx, devices)
	if err != nil {
		return nil, err
	}
	labels, err := h.opts.Store.Registry().Labels(ctx, devices)
	if err != nil {
		return nil, err
	}
	for i, c := range claims {
		f := silence.Facts{DeviceID: c.Device, DeviceType: c.Type, Parent: parents[i]}
		if labels != nil {
			f.Labels = labels[i]
		}
		out[i] = fc.SilencedUntilFacts(f, now)
	}
	return out, nil
}

// seenTimes reads the signal times of the claims whose type has expected times; nil for the others.
func (h *Handler) seenTimes(ctx context.Context, claims []deadline.Claim, pols []config.Policy) ([]*deadline.SeenTimes, error) {
	out := make([]*deadline.SeenTimes, len(claims))
	want := make([]bool, len(claims))
	any := false
	for i := range claims {
		want[i] = pols[i].Expected != nil
		any = any || want[i]
	}
	if !any {
		return out, nil
	}
	read, err := h.opts.Store.SeenOf(ctx, claims, want)
	if err != nil {
		return nil, err
	}
	for i := range claims {
		if want[i] {
			out[i] = &read[i]
		}
	}
	return out, nil
}

// seenPins keeps, for the devices with expected times, the last signal before their open incident
// (deadline.SeenPin): pinned when an incident is first claimed, so its recovery measures the outage
// from it after newer signals moved the latest; released when the incident ends.
func seenPins(claims []deadline.Claim, inputs []input, decisions []decision, failed []error) []deadline.SeenPin {
	var pins []deadline.SeenPin
	for i, c := range claims {
		seen := inputs[i].Seen
		if seen == nil || failed[i] != nil {
			continue
		}
		switch {
		case decisions[i].Ack.Op == deadline.Remove:
			pins = append(pins, deadline.SeenPin{Device: c.Device, Slot: c.Slot})
		case (c.Fresh || seen.Pinned.IsZero()) && !seen.Latest.IsZero():
			pins = append(pins, deadline.SeenPin{Device: c.Device, Slot: c.Slot, At: seen.Latest})
		}
	}
	return pins
}

// mayBeHeld: an incident whose parent may explain it (nothing reported yet, or held under its parent).
// Acknowledged or not: an ack stops repeats, not the device's own `interrupted` once its parent is back,
// as an ack while late does not stop the `interrupted` at the timeout (docs/events.md).
func mayBeHeld(st deadline.State) bool {
	return !st.Exhausted && (st.Next == 0 || st.Hold != deadline.HoldNone)
}

// outages returns each claim's correlation groups and the open outage covering it ("" for none);
// nothing while correlation is off.
func (h *Handler) outages(ctx context.Context, claims []deadline.Claim, parents []string) ([][]string, []string, error) {
	members := make([]correlate.Member, len(claims))
	for i, c := range claims {
		members[i] = correlate.Member{Device: c.Device, Type: c.Type, Parent: parents[i]}
	}
	return h.opts.Correlator.Covering(ctx, members)
}

// judgeOutages records the batch's interruptions in their groups and judges the groups' outage
// thresholds before anything is published (correlate.Correlator.Join): a member that opens or finds an
// outage goes out carrying its id, after its outage_started (announced here first); with
// correlation.group_wait, one whose groups may still become an outage waits for it instead.
func (h *Handler) judgeOutages(ctx context.Context, inputs []input, decisions []decision, groups [][]string, now time.Time) error {
	corr := h.opts.Correlator
	if corr == nil {
		return nil
	}
	var which []int
	var devices []string
	var theirs [][]string
	for i, d := range decisions {
		if len(groups[i]) > 0 && interrupts(d) {
			which = append(which, i)
			devices = append(devices, inputs[i].Claim.Device)
			theirs = append(theirs, groups[i])
		}
	}
	ids, unannounced, err := corr.Join(ctx, devices, theirs, now)
	if err != nil {
		return err
	}
	wait := corr.GroupWait()
	for k, i := range which {
		switch in := &inputs[i]; {
		case in.OutageID != "":
		case ids[k] != "":
			in.OutageID = ids[k]
			decisions[i] = decide(*in)
		case wait > 0:
			in.GroupWait = wait
			decisions[i] = decide(*in)
		}
		if inputs[i].OutageID != "" {
			// Acknowledged in full rather than left as committed: its state then says when its interruption
			// was decided, which is how a re-read (the Alertmanager re-sync) tells a member of the outage
			// from a device interrupted before it; a committed state dates it at its deadline.
			decisions[i].Committed = false
		}
	}
	return corr.Announce(ctx, unannounced)
}

// interrupts reports whether d publishes an `interrupted`.
func interrupts(d decision) bool {
	return slices.ContainsFunc(d.Events, func(e event.Event) bool { return e.Kind == event.Interrupted })
}

// wakeChildren makes the children of the devices whose verdict just changed (interrupted, suppressed,
// recovered) look at their parent again now, and handles the suppressions the wake committed.
func (h *Handler) wakeChildren(ctx context.Context, claims []deadline.Claim, decisions []decision, failed []error, now time.Time, depth int) error {
	var changed []deadline.Verdict
	for i, d := range decisions {
		if failed[i] != nil {
			continue
		}
		for _, e := range d.Events {
			if e.Kind == event.Interrupted || e.Kind == event.Suppressed || e.Kind == event.Recovered {
				changed = append(changed, deadline.Verdict{Device: claims[i].Device, Down: e.Kind != event.Recovered})
				break
			}
		}
	}
	var commit *deadline.WakeCommit
	if depth < maxWakeDepth {
		commit = &deadline.WakeCommit{Lease: h.opts.Lease, Handle: func(ctx context.Context, woken []deadline.Claim) error {
			return h.handle(ctx, woken, depth+1)
		}}
	}
	_, err := h.opts.Store.WakeChildren(ctx, changed, now, commit)
	return err
}
