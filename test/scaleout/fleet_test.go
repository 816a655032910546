// Package scaleout runs several real heartbeatd processes on one Redis and one Kafka and checks the
// replica guarantees of docs/concepts.md at the process level: a SIGKILLed replica's slots are taken over and every
// device that expired meanwhile is reported, none that kept signalling is, a SIGTERMed replica hands its
// slots over at once, and the slot count is doubled online under flowing signals and expiries.
package scaleout

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const (
	// timeout is every device's silence timeout; keepers signal every period, well inside it.
	timeout = 4 * time.Second
	period  = time.Second
	// lease bounds how long a claim the killed replica held unacknowledged waits before another replica
	// delivers it again (detection.lease, 30s by default; short here to keep the test short).
	lease = 5 * time.Second
	// spread is the window over which a group of victims' deadlines pass, centred on the disruption.
	spread = 2 * time.Second
)

// fleetSize is the number of devices, HB_SCALEOUT_DEVICES (default 2000; docs/scaling.md uses 10000):
// a fifth expire around a SIGKILL, a fifth during the slot doubling, the rest keep signalling.
func fleetSize(t *testing.T) int {
	if v := os.Getenv("HB_SCALEOUT_DEVICES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "HB_SCALEOUT_DEVICES")
		require.GreaterOrEqual(t, n, 10, "HB_SCALEOUT_DEVICES")
		return n
	}
	return 2000
}

// rounds is how many takeovers of each kind are measured, HB_SCALEOUT_ROUNDS (default 3).
func rounds(t *testing.T) int {
	if v := os.Getenv("HB_SCALEOUT_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "HB_SCALEOUT_ROUNDS")
		return max(n, 1)
	}
	return 3
}

// replicaConfig is one replica's config: every device on timeout, and a short lease. Each replica
// consumes every signal with a consumer group of its own (testenv.KafkaReplicaConfig), so slot takeover is
// what is measured here. A restarted replica still waits for its predecessor's group session before it
// reads, and holds detection back on every replica meanwhile. docs/scaling.md says what a shared group
// means in production.
func replicaConfig(id, redisAddr string, kafka []string, slots int) string {
	return groupReplicaConfig(id, "", redisAddr, kafka, slots)
}

// groupReplicaConfig is replicaConfig in the Kafka consumer group group ("" = a group of its own).
func groupReplicaConfig(id, group, redisAddr string, kafka []string, slots int) string {
	cfg := testenv.KafkaReplicaConfig{Redis: redisAddr, Slots: slots, Kafka: kafka, Replica: id, Group: group}
	return cfg.YAML(fmt.Sprintf(`types:
  default: {timeout: %s, repeat_every: 0s}
detection: {grace_after_outage: 500ms, lease: %s}
`, timeout, lease))
}

// replica is one heartbeatd process with its id.
type replica struct {
	id string
	hb *testenv.Heartbeatd
	up bool
}

type stats struct {
	Devices struct {
		Online      int64 `json:"online"`
		Interrupted int64 `json:"interrupted"`
	} `json:"devices"`
	OwnedSlots []int `json:"owned_slots"`
	Slots      int   `json:"slots"`
	HoldBack   struct {
		Active bool   `json:"active"`
		Reason string `json:"reason"`
	} `json:"hold_back"`
}

func (r *replica) stats() (stats, error) {
	code, body, err := r.hb.Get("/v1/stats")
	if err != nil {
		return stats{}, err
	}
	if code != 200 {
		return stats{}, fmt.Errorf("%s /v1/stats: %d %s", r.id, code, body)
	}
	var s stats
	return s, json.Unmarshal([]byte(body), &s)
}

// slotsOwnedMetric reads heartbeatd_slots_owned from /metrics.
func (r *replica) slotsOwnedMetric() (int, error) {
	v, found, err := r.hb.Metric("heartbeatd_slots_owned")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", r.id, err)
	}
	if !found {
		return 0, fmt.Errorf("%s: no heartbeatd_slots_owned in /metrics", r.id)
	}
	return int(v), nil
}

// fleet is the devices the test drives: every active device signals each period over Kafka.
type fleet struct {
	client *kgo.Client

	mu     sync.Mutex
	active map[string]bool
	// stops: victims that send one last signal with ts = the planned instant, then fall silent.
	stops map[string]time.Time
}

// send produces one signal per device, with ts = its entry in ts, else now. Every signal carries its
// time: a replica restarted after a SIGKILL reads again what its group had not committed, and a replayed
// signal without ts would count as received now, a false recovery of a device gone silent since.
func (f *fleet) send(ctx context.Context, devices []string, ts map[string]time.Time) error {
	recs := make([]*kgo.Record, 0, len(devices))
	now := time.Now()
	for _, d := range devices {
		at, ok := ts[d]
		if !ok {
			at = now
		}
		recs = append(recs, &kgo.Record{Topic: testenv.SignalsTopic, Key: []byte(d), Value: []byte(`{"ts":` + strconv.FormatInt(at.UnixMilli(), 10) + `}`)})
	}
	return f.client.ProduceSync(ctx, recs...).FirstErr()
}

// tick sends this period's signals: every active device, and the last signal of each victim whose stop
// instant falls before the next tick.
func (f *fleet) tick(ctx context.Context, now time.Time) error {
	f.mu.Lock()
	var devs []string
	last := map[string]time.Time{}
	for d := range f.active {
		if at, ok := f.stops[d]; ok && at.Before(now.Add(period)) {
			last[d] = at
			delete(f.active, d)
			delete(f.stops, d)
			continue
		}
		devs = append(devs, d)
	}
	for d := range last {
		devs = append(devs, d)
	}
	f.mu.Unlock()
	return f.send(ctx, devs, last)
}

// silence plans victims' last signals spread evenly over [from, from+spread): their deadlines pass over
// [from+timeout, from+timeout+spread).
func (f *fleet) silence(victims []string, from time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, d := range victims {
		f.stops[d] = from.Add(time.Duration(i) * spread / time.Duration(len(victims)))
	}
}

// events are the events heartbeatd published, with the questions the scale-out test asks of them.
type events struct{ *testenv.Events }

// missing returns the devices with no interrupted event yet.
func (e events) missing(devices []string) []string {
	var out []string
	for _, d := range devices {
		if !slices.ContainsFunc(e.Of(d), func(ev event.Event) bool { return ev.Kind == event.Interrupted }) {
			out = append(out, d)
		}
	}
	return out
}

// check returns, over devices, the ones with events although they kept signalling (false), the number of
// re-published events (same id: the duplicates at-least-once allows), and the ones with more than one
// distinct interruption (a handover that emitted the same outage twice under different ids).
func (e events) check(victims, keepers []string) (falsely []string, dups int, twice []string) {
	for _, d := range keepers {
		if evs := e.Of(d); len(evs) > 0 {
			falsely = append(falsely, fmt.Sprintf("%s: %s %s deadline %s", d, evs[0].Kind, evs[0].ID, evs[0].Deadline))
		}
	}
	for _, d := range victims {
		ids := map[string]int{}
		for _, ev := range e.Of(d) {
			ids[ev.ID]++
		}
		for _, n := range ids {
			dups += n - 1
		}
		if len(ids) > 1 {
			twice = append(twice, d)
		}
	}
	return falsely, dups, twice
}

// lateness returns, for victims, the time from deadline to the first interrupted event's at.
func (e events) lateness(victims []string) []time.Duration {
	var out []time.Duration
	for _, d := range victims {
		for _, ev := range e.Of(d) {
			if ev.Kind == event.Interrupted {
				out = append(out, ev.At.Sub(ev.Deadline))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %v, max %v (n=%d)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}
