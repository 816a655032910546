package main

// The scale scenario's replica failure: one of the two replicas SIGKILLed, timed from the kill until the
// survivor owns every slot, answers /readyz again and has the dead replica's Kafka partitions read.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// killFigures is what a SIGKILL of one replica cost, each timed from the kill.
type killFigures struct {
	takeover time.Duration // until the survivor's heartbeatd_slots_owned reached heartbeatd_slots
	// unready is when the survivor's /readyz first answered other than 200 (why: its body), ready when it
	// last turned 200 again; both 0 when it never did.
	unready, ready time.Duration
	why            string
	// shareRead is until a signal written to each partition at the kill was applied, on the slowest
	// partition (one of the dead replica's); ownRead on the fastest (one of the survivor's).
	shareRead, ownRead time.Duration
}

// killWatch bounds how long killReplica waits for the survivor to take everything over.
const killWatch = 2 * time.Minute

// killReplica SIGKILLs victim once both replicas answer /readyz (both joined the group: kfake never
// expires a member killed while its join is pending), writes a signal of a new device to each partition
// of the signal topic, and follows the survivor every 50 ms.
func killReplica(e *env, k *testenv.Kafka, survivor, victim *testenv.Heartbeatd) (killFigures, error) {
	for _, hb := range []*testenv.Heartbeatd{survivor, victim} {
		if err := hb.AwaitReady(e.ctx, killWatch); err != nil {
			return killFigures{}, err
		}
	}
	slots, found, err := survivor.Metric("heartbeatd_slots")
	if err != nil || !found {
		return killFigures{}, fmt.Errorf("hbbench: heartbeatd_slots: found %v: %w", found, err)
	}
	store, err := deadline.New(e.redis.client, deadline.Options{Slots: config.DefaultSlots, Timeout: benchTimeout})
	if err != nil {
		return killFigures{}, err
	}
	cl, err := kgo.NewClient(append(k.ClientOpts(), kgo.DefaultProduceTopic(signalTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return killFigures{}, err
	}
	defer cl.Close()
	w := &killWatcher{survivor: survivor, store: store, slots: slots, probes: map[string]bool{}}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	recs := make([]*kgo.Record, 0, scalePartitions)
	for p := range int32(scalePartitions) {
		id := fmt.Sprintf("share-probe-%s-%d", stamp, p)
		w.probes[id] = true
		recs = append(recs, &kgo.Record{Key: []byte(id), Value: []byte(`{"type":"default"}`), Partition: p})
	}
	killed := time.Now()
	if err := syscall.Kill(victim.PID(), syscall.SIGKILL); err != nil {
		return killFigures{}, err
	}
	if err := cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
		return killFigures{}, fmt.Errorf("hbbench: share probes: %w", err)
	}
	for {
		done, err := w.observe(e, time.Since(killed))
		if done || err != nil {
			return w.f, err
		}
		if !loop.Sleep(e.ctx, 50*time.Millisecond) {
			return w.f, e.ctx.Err()
		}
	}
}

// killWatcher follows the survivor of a kill.
type killWatcher struct {
	survivor *testenv.Heartbeatd
	store    *deadline.Store
	slots    float64
	probes   map[string]bool // a new device per partition, until applied
	notReady bool
	f        killFigures
}

// observe looks at the survivor since after the kill, and reports whether it took everything over.
func (w *killWatcher) observe(e *env, since time.Duration) (done bool, err error) {
	if w.f.takeover == 0 {
		owned, _, err := w.survivor.Metric("heartbeatd_slots_owned")
		if err != nil {
			return false, err
		}
		if owned >= w.slots {
			w.f.takeover = since
		}
	}
	code, body, err := w.survivor.Get("/readyz")
	if err != nil {
		return false, err
	}
	switch {
	case code != http.StatusOK && w.f.unready == 0:
		w.f.unready, w.f.why, w.notReady = since, failingChecks(body), true
	case code != http.StatusOK:
		w.notReady = true
	case w.notReady:
		w.f.ready, w.notReady = since, false
	}
	for id := range w.probes {
		_, applied, err := w.store.Device(e.ctx, id)
		if err != nil {
			return false, err
		}
		if applied {
			w.f.shareRead = since
			if len(w.probes) == scalePartitions {
				w.f.ownRead = since
			}
			delete(w.probes, id)
		}
	}
	// /readyz answers from a check every 2 s, on a group observed every 500 ms: a few seconds more
	// after the last partition was read, so a late turn to 503 is seen too.
	if w.f.takeover > 0 && len(w.probes) == 0 && !w.notReady && since > w.f.shareRead+5*time.Second {
		return true, nil
	}
	if since > killWatch {
		return false, fmt.Errorf("hbbench: after a kill, %s on: slots taken over after %s, %d partitions unread, /readyz %d %s",
			killWatch, w.f.takeover, len(w.probes), code, body)
	}
	return false, nil
}

// report adds the kill's figures.
func (f killFigures) report(e *env, tag string) {
	e.add("scale", tag+" slot takeover after SIGKILL", f.takeover.Seconds(), "s",
		"until the survivor owned every slot (heartbeatd_slots_owned = heartbeatd_slots); bound: cluster.slot_lease 3s after the dead replica's last heartbeat")
	e.add("scale", tag+" dead share read again", f.shareRead.Seconds(), "s",
		fmt.Sprintf("a signal written to each partition at the kill, applied: the slowest partition; the fastest %.2fs; ingest.kafka.session_timeout 10s, a heartbeat every tenth of it", f.ownRead.Seconds()))
	note := "never unready"
	if f.unready > 0 {
		note = fmt.Sprintf("503 from %.2fs after the kill (%s) until then", f.unready.Seconds(), f.why)
	}
	e.add("scale", tag+" survivor /readyz 200 again", f.ready.Seconds(), "s", note)
}

// failingChecks names the checks of a /readyz answer that are not "ok", with why.
func failingChecks(body string) string {
	var checks map[string]any
	if err := json.Unmarshal([]byte(body), &checks); err != nil {
		return body
	}
	var out []string
	for name, v := range checks {
		if s, ok := v.(string); ok && s != "ok" {
			out = append(out, name+": "+s)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
