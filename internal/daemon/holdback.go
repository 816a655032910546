package daemon

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// buildHoldBack builds the hold-back of replica from the sources built already: each is a probe, and
// its shares of the signals are advertised to the other replicas.
func (d *daemon) buildHoldBack(replica string, reg prometheus.Registerer) *holdback.Tracker {
	var probes []holdback.Probe
	var shares []holdback.Share
	var clientIDs []string // a second replica with one of them is refused at start (holdback.ErrReplicaInUse)
	if d.cfg.Ingest.MQTT.Enabled {
		clientIDs = append(clientIDs, d.cfg.MQTTClientID())
	}
	for _, src := range d.sources {
		probe := holdback.Probe{Name: src.Name(), Trouble: func(now time.Time) holdback.ProbeTrouble { return d.probeTrouble(src, now) }}
		if r, ok := src.(interface{ ReadUpTo() time.Time }); ok {
			probe.Floor = func(time.Time) time.Time {
				if t := r.ReadUpTo(); !t.IsZero() {
					return t.Add(d.cfg.Ingest.MaxLag)
				}
				return time.Time{}
			}
		}
		probes = append(probes, probe)
		if sh, ok := src.(ingest.Sharing); ok {
			for _, s := range sh.Shares() {
				s.TakenOver = sh.TakenOver
				shares = append(shares, s)
			}
		}
	}
	return holdback.New(holdback.Options{Client: d.rdb, KeyPrefix: d.cfg.Redis.KeyPrefix, ReplicaID: replica, Probes: probes,
		Shares: shares, Incarnation: d.incarnation, ClientIDs: clientIDs,
		Grace:    d.graceAfterOutage,
		Timeouts: func() map[string]time.Duration { return d.policies.Load().Timeouts() },
		WriteFailure: func() time.Time {
			if f := d.chain.WriteFailure(); f != nil {
				return d.shared(f.Since)
			}
			return time.Time{}
		},
		WriteTrouble: func() (time.Time, time.Time) {
			if t := d.chain.LastWriteTrouble(); !t.To.IsZero() {
				return d.shared(t.From), d.shared(t.To)
			}
			return time.Time{}, time.Time{}
		},
		MaxHoldBack: d.cfg.Detection.MaxHoldBack, Stall: d.cfg.Detection.Stall, ClockCheck: d.clock.Check, Now: d.clock.Now,
		Logger: d.log, Registerer: reg})
}

// unready says why src keeps this replica from being ready ("" when it does not): its own share of the
// signals is not read in time. A shared source's trouble with the other members' shares (a group's lag
// or rebalance) holds detection back (probeTrouble) but is only a note here: a survivor is ready as soon
// as it reads what it was assigned.
func (d *daemon) unready(src ingest.Source) string { return d.unreadyOf(src.Health()) }

func (d *daemon) unreadyOf(h ingest.Health) string {
	switch {
	case !h.Connected:
		return fmt.Sprintf("disconnected since %s", d.shared(h.Since).UTC().Format(time.RFC3339))
	case h.OwnLag > d.cfg.Ingest.MaxLag:
		return fmt.Sprintf("lagging %s behind", h.OwnLag.Round(time.Millisecond))
	case !h.Blind.IsZero() && !h.BlindShared:
		return fmt.Sprintf("%s since %s", h.BlindWhy, h.Blind.UTC().Format(time.RFC3339))
	}
	return ""
}

// groupNote says what the hold-back waits for in src beyond this replica's own share ("" when nothing).
func (d *daemon) groupNote(src ingest.Source, now time.Time) string {
	h := src.Health()
	if t := d.troubleOf(h, now); t.Why != "" && d.unreadyOf(h) == "" {
		return fmt.Sprintf("%s since %s: detection of the devices it may affect waits for it", t.Why, t.Since.UTC().Format(time.RFC3339))
	}
	return ""
}

// probeTrouble is src's health as a blind window sees it. A lag or a rebalance of a source whose broker
// keeps what it did not deliver (Kafka) loses nothing: it needs no grace once over.
func (d *daemon) probeTrouble(src ingest.Source, now time.Time) holdback.ProbeTrouble {
	return d.troubleOf(src.Health(), now)
}

func (d *daemon) troubleOf(h ingest.Health, now time.Time) holdback.ProbeTrouble {
	if !h.Connected {
		// Even a broker that keeps every record may have refused the devices' own writes meanwhile.
		return holdback.ProbeTrouble{Since: d.shared(h.Since), Why: "disconnected"}
	}
	t := holdback.ProbeTrouble{Kept: h.Kept}
	if h.Lag > d.cfg.Ingest.MaxLag {
		t.Since, t.Why = now.Add(-h.Lag), fmt.Sprintf("lagging %s behind", h.Lag.Round(time.Millisecond))
	}
	if !h.Blind.IsZero() && (t.Why == "" || h.Blind.Before(t.Since)) {
		t.Since, t.Why = h.Blind, h.BlindWhy // on the shared clock already
	}
	return t
}

// graceAfterOutage caps the grace after a blind window (holdback.Options.Grace):
// detection.grace_after_outage, or when that is 0 the longest timeout of any type, per-device timeouts
// included, so that every device waits its own.
func (d *daemon) graceAfterOutage() time.Duration {
	if g := d.coord.Current().Detection.GraceAfterOutage; g > 0 {
		return g
	}
	return max(d.policies.Load().LongestTimeout(), d.store.LongestTimeout())
}

// shared reads a source's local-clock time on the clock the blind windows use.
func (d *daemon) shared(local time.Time) time.Time {
	if d.clock == nil {
		return local
	}
	return d.clock.Shared(local)
}
