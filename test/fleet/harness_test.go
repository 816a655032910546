package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const (
	signalsTopic = "device-signals"
	eventsTopic  = "heartbeat.events"
	deadTopic    = "heartbeat.deadletter"
	// period is how often every live device signals, unless a test sets fleet.period.
	period = 500 * time.Millisecond
)

// env is one Redis, one Kafka, the replicas on them, the signalling fleet and the events read back.
type env struct {
	t        *testing.T
	redis    string
	kafka    *testenv.Kafka
	replicas []*testenv.Heartbeatd
	fleet    *fleet
	events   *events
}

// start brings up Redis, Kafka and n replicas with sections (types, detection, correlation) added to
// their config. Each replica reads every signal with a consumer group of its own, so SIGKILLing one
// loses no signal: what is measured is the takeover of its slots and of its claims mid-outage.
func start(t *testing.T, n int, sections string, fleetPeriod ...time.Duration) *env {
	t.Helper()
	e := &env{t: t, redis: testenv.StartRedis(t).Addr,
		kafka:  testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{signalsTopic, eventsTopic, deadTopic}}),
		events: &events{byDev: map[string][]event.Event{}}}
	for i := range n {
		id := "r" + strconv.Itoa(i+1)
		e.replicas = append(e.replicas, testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: e.config(id, sections)}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range e.replicas {
		require.NoError(t, r.AwaitReady(ctx, time.Minute), r.LogTail())
	}
	e.kafka.Consume(t, e.events.add, eventsTopic) // every event is checked against the schema as read
	e.fleet = &fleet{client: e.kafka.Client(t), live: map[string]signal{}, period: period}
	if len(fleetPeriod) > 0 {
		e.fleet.period = fleetPeriod[0]
	}
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.fleet.run(fctx) }()
	t.Cleanup(func() { stop(); <-done })
	return e
}

func (e *env) config(id, sections string) string {
	return fmt.Sprintf(`
redis: {addrs: [%q], slots: 16}
ingest:
  mqtt: {enabled: false}
  kafka: {enabled: true, brokers: [%q], topics: [%q], group_id: "hb-%s", session_timeout: 6s}
events:
  kafka: {brokers: [%q], topic: %q, deadletter_topic: %q}
cluster: {replica_id: %q}
log: {level: info, format: json}
%s`, e.redis, e.kafka.Addrs[0], signalsTopic, id, e.kafka.Addrs[0], eventsTopic, deadTopic, id, sections)
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
	period time.Duration
	mu     sync.Mutex
	live   map[string]signal
	errs   []string
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
		recs = append(recs, &kgo.Record{Topic: signalsTopic, Key: []byte(d), Value: b})
	}
	return f.client.ProduceSync(ctx, recs...).FirstErr()
}

func (f *fleet) run(ctx context.Context) {
	tk := time.NewTicker(f.period)
	defer tk.Stop()
	for {
		f.mu.Lock()
		batch := make(map[string]signal, len(f.live))
		for d, s := range f.live {
			batch[d] = s
		}
		f.mu.Unlock()
		if err := f.send(ctx, batch, time.Now()); err != nil && ctx.Err() == nil {
			f.mu.Lock()
			f.errs = append(f.errs, err.Error())
			f.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// events collects every event heartbeatd publishes, by device (or outage group).
type events struct {
	mu    sync.Mutex
	byDev map[string][]event.Event
	bad   []string
}

func (e *events) add(r testenv.Record) {
	ev, err := event.Decode(r.Value)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.bad = append(e.bad, err.Error())
		return
	}
	e.byDev[ev.DeviceID] = append(e.byDev[ev.DeviceID], ev)
}

// count returns how many of devices have at least one distinct event of kind (and, when since is not
// zero, raised at or after it).
func (e *events) count(devices []string, kind event.Kind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, d := range devices {
		for _, ev := range e.byDev[d] {
			if ev.Kind == kind {
				n++
				break
			}
		}
	}
	return n
}

// kinds returns the distinct event ids of kind among devices (duplicates of at-least-once delivery
// counted once).
func (e *events) ids(devices []string, kinds ...event.Kind) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, d := range devices {
		for _, ev := range e.byDev[d] {
			for _, k := range kinds {
				if ev.Kind == k && !seen[ev.ID] {
					seen[ev.ID] = true
					out = append(out, ev.ID)
				}
			}
		}
	}
	return out
}

// outageID is the id the first event of the outage group carries.
func (e *events) outageID(group string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.byDev[group] {
		return ev.OutageID
	}
	return ""
}

// tagged counts devices whose `interrupted` carries outage id.
func (e *events) tagged(devices []string, outage string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, d := range devices {
		for _, ev := range e.byDev[d] {
			if ev.Kind == event.Interrupted && ev.OutageID == outage {
				n++
				break
			}
		}
	}
	return n
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}
