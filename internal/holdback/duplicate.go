package holdback

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// ErrReplicaInUse is Start's error when another live heartbeatd process holds this replica's id or one
// of its broker client ids: starting anyway would take its MQTT session over, again and again, losing
// messages on both sides.
var ErrReplicaInUse = errors.New("refusing to start beside a live replica of the same identity " +
	"(two of one MQTT client id take each other's session over)")

// ownIdentity is the advice that ends a clash.
const ownIdentity = "give every replica its own cluster.replica_id and ingest.mqtt.client_id " +
	"(which defaults to heartbeatd-<cluster.replica_id, else the host name>)"

// refuseDuplicate returns ErrReplicaInUse while another live process holds this replica's entry in the
// Windows hash (same replica id, another incarnation) or advertises one of its client ids.
//
// What is live: an entry whose last word is older than MemberLapse is dead, like a member's (member.go).
// A newer one may be this replica's own predecessor that crashed a moment ago, so it is read again every
// Interval: a live process rewrites it every Interval (refuse), a dead one leaves it as it was, and one
// unchanged for four Intervals (1s by default; at most MemberLapse) is not running (go on). A replica
// restarting with its replica id is therefore never blocked by itself, only delayed by that after a
// crash; a graceful stop removed the entry and delays nothing. One paused meanwhile and back later is
// left to warnDuplicates.
func (h *Tracker) refuseDuplicate(ctx context.Context) error {
	first := map[string]string{} // rival replica → its entry as first read
	tick := time.NewTicker(h.opts.Interval)
	defer tick.Stop()
	watched := time.NewTimer(min(h.opts.MemberLapse, 4*h.opts.Interval))
	defer watched.Stop()
	for {
		all, err := h.opts.Client.HGetAll(ctx, h.keys.windows()).Result()
		if err != nil {
			return fmt.Errorf("holdback: read the replicas' entries: %w", err)
		}
		now := h.opts.Now()
		watching := false
		for replica, v := range all {
			e, clash := h.liveClash(now, replica, v)
			if clash == "" {
				continue
			}
			if seen, ok := first[replica]; ok && seen != v {
				return fmt.Errorf("%w: %s (it wrote its entry %s ago); %s", ErrReplicaInUse, clash,
					now.Sub(e.at).Round(time.Millisecond), ownIdentity)
			}
			first[replica] = v
			watching = true
		}
		if !watching {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-watched.C:
			return nil // unchanged for four Intervals: left by processes that are not running
		case <-tick.C:
		}
	}
}

// warnDuplicates logs, once per process of it, each live replica found holding this replica's identity
// after both started: one that started while this replica was paused past the check's watch, or one of
// a version that does not check at start. Their MQTT sessions take each other over until one stops. A
// rival is live once its entry changed between two ticks: a process that died just before this one
// started leaves its entry as it was. (One of this replica's own id is caught at start only: each tick
// reads back the entry it just wrote.)
func (h *Tracker) warnDuplicates(now time.Time, shared map[string]string) {
	current := map[string]rival{}
	for replica, v := range shared {
		e, clash := h.liveClash(now, replica, v)
		if clash == "" {
			continue
		}
		process := replica + "/" + e.incarnation
		r := h.rivals[process]
		if !r.logged && r.entry != "" && r.entry != v {
			h.log.Error("another live replica holds this replica's identity, and their MQTT sessions take each other over: "+
				clash+"; stop one of them and "+ownIdentity,
				zap.String("replica", replica), zap.String("incarnation", e.incarnation))
			r.logged = true
		}
		r.entry = v
		current[process] = r
	}
	h.rivals = current
}

// rival is a process holding this replica's identity as the last tick read it.
type rival struct {
	entry  string // its entry then
	logged bool
}

// liveClash decodes replica's entry v and says what of this replica's identity it holds: "" when
// nothing, when v is malformed, or when its last word is older than MemberLapse (a dead process's).
func (h *Tracker) liveClash(now time.Time, replica, v string) (entry, string) {
	e, ok := decodeEntry(replica, v)
	if !ok || now.Sub(e.at) > h.opts.MemberLapse {
		return e, ""
	}
	return e, h.clash(replica, e)
}

// clash says what of this replica's identity the entry of replica holds, "" when nothing.
func (h *Tracker) clash(replica string, e entry) string {
	if replica == h.opts.ReplicaID {
		if e.incarnation == h.opts.Incarnation {
			return "" // this process's own, written by an earlier attempt of Start
		}
		return fmt.Sprintf("replica id %q is in use by another running process", replica)
	}
	theirs := slices.Clone(e.clientIDs)
	for _, s := range e.shares { // replicas that predate client_ids advertise their MQTT client id as a member
		theirs = append(theirs, s.Member)
	}
	for _, id := range h.clientIDs() {
		if slices.Contains(theirs, id) {
			return fmt.Sprintf("MQTT client id %q of replica %q is in use by running replica %q", id, h.opts.ReplicaID, replica)
		}
	}
	return ""
}

// clientIDs are the broker identities this replica holds alone: ClientIDs, and its shares' members (a
// Kafka member tag holds the incarnation, so only an MQTT client id can ever clash).
func (h *Tracker) clientIDs() []string {
	ids := slices.Clone(h.opts.ClientIDs)
	for _, s := range h.opts.Shares {
		ids = append(ids, s.Member)
	}
	return ids
}
