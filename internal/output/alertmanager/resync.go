package alertmanager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// resync posts the firing alert of every open incident in the slots this replica owns to ts, a page
// of a slot's incidents at a time, with the events queued meanwhile handled between pages (so a resolve
// observed during the round is posted after the firing alert read before it). Open means reported
// (interrupted or suppressed sent), not acknowledged and not silenced; exhausted incidents stay open.
// The replica owning slot 0 also re-posts the open outages.
func (o *Output) resync(ctx context.Context, ts []*target) {
	if len(ts) == 0 {
		return
	}
	o.prune(o.opts.Now())
	slots := o.opts.Slots()
	if o.opts.Store != nil {
		for _, slot := range slots {
			if err := o.resyncSlot(ctx, ts, slot); err != nil {
				if ctx.Err() != nil {
					return
				}
				o.log.Warn("re-sync of a slot failed; its alerts are posted again next round", zap.Int("slot", slot), zap.Error(err))
			}
		}
	}
	if o.opts.Outages != nil && slices.Contains(slots, 0) {
		outages, err := o.opts.Outages(ctx)
		if err != nil {
			o.log.Warn("listing the open outages failed; their alerts are posted again next round", zap.Error(err))
			return
		}
		now := o.opts.Now()
		alerts := make([]alert, 0, len(outages))
		for _, out := range outages {
			alerts = append(alerts, o.outageAlert(out, false, now))
		}
		o.send(ctx, ts, alerts)
	}
}

// resyncSlot posts the open incidents of one slot, a page (deadline.Store.ScanOpenIncidents) at a time.
func (o *Output) resyncSlot(ctx context.Context, ts []*target, slot int) error {
	var cursor uint64
	for {
		open, next, err := o.opts.Store.ScanOpenIncidents(ctx, slot, cursor, o.opts.Batch)
		if err != nil {
			return fmt.Errorf("alertmanager: list slot %d: %w", slot, err)
		}
		now := o.opts.Now()
		var incs []incident
		var states []deadline.State
		for _, oi := range open {
			dl := oi.Deadline() // as its events carried it
			if r, ok := o.recent[oi.Device]; ok && r.deadline == dl.UnixMilli() {
				continue
			}
			if o.opts.Silenced(oi.Device, oi.Type, now) {
				continue
			}
			inc := incident{device: oi.Device, typ: oi.Type, deadline: dl, lastSeen: oi.LastSeen(), warning: oi.Late()}
			if oi.Cause != nil {
				inc.cause, inc.reason = oi.Cause.Kind, oi.Cause.Reason
			}
			incs, states = append(incs, inc), append(states, oi.State)
		}
		o.withParents(ctx, incs)
		var unseen []int // incidents not fired here: Redis explains them, their outages included
		for i := range incs {
			if m, ok := o.remembered[incs[i].device]; ok && m.deadline == incs[i].deadline.UnixMilli() {
				incs[i].parent, incs[i].inhibitedBy = m.x.parent, m.x.inhibitedBy // as it was fired
			} else if !incs[i].warning { // a warning is explained by nothing: it is no interruption yet
				unseen = append(unseen, i)
			}
		}
		outages := o.outagesOf(ctx, incs, states, unseen)
		for j, i := range unseen {
			incs[i].inhibitedBy = explainedBy(states[i], incs[i].parent, outages[j])
		}
		alerts := make([]alert, 0, len(incs))
		for _, inc := range incs {
			o.remember(inc, now)
			alerts = append(alerts, o.firing(inc, now))
		}
		o.send(ctx, ts, alerts)
		o.handleQueued(ctx)
		if next == 0 || ctx.Err() != nil {
			return nil
		}
		cursor = next
	}
}

// Incident is an open incident read from Redis, as Options.OutageOf is asked about it.
type Incident struct {
	Device, Type, Parent string
	InterruptedAt        time.Time // when its interruption was reported
}

// outagesOf asks OutageOf about the incidents of a page at positions which, and answers in their order;
// "" for each where it cannot tell. The remembered ones are not asked: what they were fired with stands.
func (o *Output) outagesOf(ctx context.Context, incs []incident, states []deadline.State, which []int) []string {
	out := make([]string, len(which))
	if o.opts.OutageOf == nil || len(which) == 0 {
		return out
	}
	ask := make([]Incident, len(which))
	for j, i := range which {
		inc := incs[i]
		ask[j] = Incident{Device: inc.device, Type: inc.typ, Parent: inc.parent, InterruptedAt: time.UnixMilli(states[i].InterruptedAt)}
	}
	ids, err := o.opts.OutageOf(ctx, ask)
	if err != nil || len(ids) != len(which) {
		o.log.Warn("reading the incidents' outages failed; members not fired here go out unmarked", zap.Error(err))
		return out
	}
	return ids
}

// explainedBy is what explains an open incident's silence as Redis records it, for an incident this
// replica did not see fired, the way its events said it: its parent while the incident waits on the
// parent (suppressed, or waiting for its own verdict after the parent's recovery), else the outage it
// is a member of.
func explainedBy(st deadline.State, parent, outage string) string {
	if parent != "" && st.Hold != deadline.HoldNone {
		return parent
	}
	return outage
}

// prune forgets what can no longer matter: resolves older than two resends (every re-sync read since
// saw the end in Redis) and remembered labels not used for longer than an alert lives.
func (o *Output) prune(now time.Time) {
	for device, e := range o.recent {
		if now.Sub(e.at) > 2*o.opts.ResendEvery {
			delete(o.recent, device)
		}
	}
	for device, m := range o.remembered {
		if now.Sub(m.seen) > o.endsAfter() {
			delete(o.remembered, device)
		}
	}
}
