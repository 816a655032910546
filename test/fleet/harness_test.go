package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/invariant"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// period is how often every live device signals, unless a test starts the fleet with another.
const period = 500 * time.Millisecond

// env is one Redis, one Kafka, the replicas on them, the signalling fleet and the events read back.
type env struct {
	t        *testing.T
	redis    string
	kafka    *testenv.Kafka
	replicas []*testenv.Heartbeatd
	fleet    *fleet
	events   events
	// incidents checks every event and every signal against the incident's invariants
	// (docs/concepts.md#the-incident) when the test ends.
	incidents *invariant.Checker
}

// take files an event for the test's questions and hands it to the incident checker.
func (e *env) take(r testenv.Record) {
	e.events.Add(r)
	if ev, err := event.Decode(r.Value); err == nil {
		e.incidents.Event(ev, r.Offset)
	}
}

// checkIncidents fails the test when the run broke an incident invariant; a recovered still on its way
// is awaited for a few seconds.
func (e *env) checkIncidents() {
	var r invariant.Report
	deadline := time.Now().Add(15 * time.Second)
	for r = e.incidents.Check(); len(r.Violations) > 0 && time.Now().Before(deadline); r = e.incidents.Check() {
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Logf("fleet: %s %s", e.t.Name(), r.Summary())
	if len(r.Violations) > 0 {
		e.t.Errorf("incident invariants broken:\n%s\n%s", r.Details(20), e.explain(r.Violations))
	}
}

// explain is what a broken invariant needs read next: each running replica's view of the first three
// devices in question (GET /v1/devices/{id}) and its log's tail.
func (e *env) explain(vs []invariant.Violation) string {
	var b strings.Builder
	for i, h := range e.replicas {
		if h.Exited() {
			continue
		}
		fmt.Fprintf(&b, "replica r%d:\n", i+1)
		for _, v := range vs[:min(3, len(vs))] {
			code, body, err := h.Get("/v1/devices/" + url.PathEscape(v.Device))
			fmt.Fprintf(&b, "  GET /v1/devices/%s: %d %s %v\n", v.Device, code, body, err)
		}
		b.WriteString(h.LogTail())
		b.WriteString("\n")
	}
	return b.String()
}

// typeTimeouts reads each type's timeout from a test's config sections, for the incident checker.
func typeTimeouts(t *testing.T, sections string) map[string]time.Duration {
	t.Helper()
	var cfg struct {
		Types map[string]struct {
			Timeout time.Duration `yaml:"timeout"`
		} `yaml:"types"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(sections), &cfg), "the test's config sections")
	out := map[string]time.Duration{}
	for name, typ := range cfg.Types {
		out[name] = typ.Timeout
	}
	return out
}

// start brings up Redis, Kafka and n replicas with sections (types, detection, correlation) added to
// their config. Each replica reads every signal with a consumer group of its own, so SIGKILLing one
// loses no signal: what is measured is the takeover of its slots and of its claims mid-outage.
func start(t *testing.T, n int, sections string, fleetPeriod ...time.Duration) *env {
	t.Helper()
	e := &env{t: t, redis: testenv.StartRedis(t).Addr,
		kafka:  testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.SignalsTopic, testenv.EventsTopic, testenv.DeadLetterTopic}}),
		events: events{testenv.NewEvents()}}
	for i := range n {
		cfg := testenv.KafkaReplicaConfig{Redis: e.redis, Slots: 16, Kafka: e.kafka.Addrs, Replica: "r" + strconv.Itoa(i+1)}
		e.replicas = append(e.replicas, testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: cfg.YAML(sections)}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range e.replicas {
		require.NoError(t, r.AwaitReady(ctx, time.Minute), r.LogTail())
	}
	e.incidents = invariant.New(invariant.Options{})
	e.kafka.Consume(t, e.take, testenv.EventsTopic) // every event is checked against the schema as read
	e.fleet = &fleet{client: e.kafka.Client(t), live: map[string]signal{}, timeouts: typeTimeouts(t, sections), incidents: e.incidents}
	t.Cleanup(e.checkIncidents)
	every := period
	if len(fleetPeriod) > 0 {
		every = fleetPeriod[0]
	}
	signalling := testenv.Repeat(t, every, e.fleet.tick)
	// A signal that was never produced would pass for a device gone silent.
	t.Cleanup(func() { assert.Empty(t, signalling.Failures(), "the fleet's signals were all produced") })
	return e
}

// kill SIGKILLs replica i.
func (e *env) kill(i int) {
	e.t.Helper()
	e.replicas[i].Kill(e.t)
}

// await polls cond every 100 ms until it holds or within passes; it fails with what describe says.
func (e *env) await(within time.Duration, cond func() bool, describe func() string) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			var tails []string
			for i, r := range e.replicas {
				tails = append(tails, fmt.Sprintf("replica %d:\n%s", i+1, r.LogTail()))
			}
			e.t.Fatalf("not within %s: %s\n%s", within, describe(), strings.Join(tails, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitOnline waits until Redis holds n devices online, as the first replica's /v1/stats counts them.
func (e *env) awaitOnline(n int) {
	e.t.Helper()
	var last string
	e.await(30*time.Second, func() bool {
		code, body, err := e.replicas[0].Get("/v1/stats")
		last = fmt.Sprintf("%d %s %v", code, body, err)
		var s struct {
			Devices struct {
				Online int `json:"online"`
			} `json:"devices"`
		}
		return err == nil && code == 200 && json.Unmarshal([]byte(body), &s) == nil && s.Devices.Online >= n
	}, func() string { return fmt.Sprintf("%d devices online; last /v1/stats: %s", n, last) })
}

// signal is what a live device sends besides its id.
type signal struct {
	typ, parent string
}

// fleet signals every period for each live device, with ts = now.
type fleet struct {
	client *kgo.Client
	mu     sync.Mutex
	live   map[string]signal
	// timeouts are the configured types' timeouts; a signal of a type not among them is not handed to
	// incidents, which judges only what it knows the timeout of.
	timeouts  map[string]time.Duration
	incidents *invariant.Checker
}

func (f *fleet) add(devices []string, s signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range devices {
		f.live[d] = s
	}
}

// once sends one signal now for each of devices, which stay silent after it.
func (f *fleet) once(ctx context.Context, devices []string, s signal) error {
	batch := make(map[string]signal, len(devices))
	for _, d := range devices {
		batch[d] = s
	}
	return f.send(ctx, batch, time.Now())
}

// stop makes devices fall silent after one last signal now, and returns that instant.
func (f *fleet) stop(ctx context.Context, devices []string) (time.Time, error) {
	f.mu.Lock()
	last := map[string]signal{}
	for _, d := range devices {
		last[d] = f.live[d]
		delete(f.live, d)
	}
	f.mu.Unlock()
	now := time.Now()
	return now, f.send(ctx, last, now)
}

func (f *fleet) send(ctx context.Context, devices map[string]signal, at time.Time) error {
	recs := make([]*kgo.Record, 0, len(devices))
	for d, s := range devices {
		v := map[string]any{"ts": at.UnixMilli()}
		if s.typ != "" {
			v["type"] = s.typ
		}
		if s.parent != "" {
			v["parent"] = s.parent
		}
		b, _ := json.Marshal(v)
		recs = append(recs, &kgo.Record{Topic: testenv.SignalsTopic, Key: []byte(d), Value: b})
	}
	if err := f.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return err
	}
	acked := time.Now()
	for d, s := range devices {
		typ := s.typ
		if typ == "" {
			typ = "default"
		}
		if timeout, ok := f.timeouts[typ]; ok {
			f.incidents.Signal(d, at, acked, timeout)
		}
	}
	return nil
}

// tick sends this period's signal of every live device.
func (f *fleet) tick(ctx context.Context) error {
	f.mu.Lock()
	batch := make(map[string]signal, len(f.live))
	for d, s := range f.live {
		batch[d] = s
	}
	f.mu.Unlock()
	return f.send(ctx, batch, time.Now())
}

// events are the events heartbeatd published, with the questions the fleet tests ask of them.
type events struct{ *testenv.Events }

// count returns how many of devices have at least one event of kind.
func (e events) count(devices []string, kind event.Kind) int {
	n := 0
	for _, d := range devices {
		if slices.ContainsFunc(e.Of(d), func(ev event.Event) bool { return ev.Kind == kind }) {
			n++
		}
	}
	return n
}

// ids returns the distinct event ids of kinds among devices (duplicates of at-least-once delivery
// counted once).
func (e events) ids(devices []string, kinds ...event.Kind) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range devices {
		for _, ev := range e.Of(d) {
			if slices.Contains(kinds, ev.Kind) && !seen[ev.ID] {
				seen[ev.ID] = true
				out = append(out, ev.ID)
			}
		}
	}
	return out
}

// outageID is the id the first event of the outage group carries.
func (e events) outageID(group string) string {
	for _, ev := range e.Of(group) {
		return ev.OutageID
	}
	return ""
}

// tagged counts devices whose `interrupted` carries outage id.
func (e events) tagged(devices []string, outage string) int {
	n := 0
	for _, d := range devices {
		if slices.ContainsFunc(e.Of(d), func(ev event.Event) bool { return ev.Kind == event.Interrupted && ev.OutageID == outage }) {
			n++
		}
	}
	return n
}
