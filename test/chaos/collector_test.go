package chaos

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/invariant"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// collector reads the event and dead-letter topics from the start for the whole scenario.
type collector struct {
	kafka *testenv.Kafka
	mu    sync.Mutex
	// seen are the records taken in, by topic, partition and offset: a second read of the topics adds
	// only what the first one missed.
	seen        map[recordAt]bool
	devices     map[event.Kind]map[string]*deviceEvents // kind → device → its events of that kind
	deadletters map[string][]string                     // dead-letter topic field → reasons (all copies)
	bad         []string                                // values that did not decode
	// early are interruptions raised before their deadline (heartbeatd's at) or read before it on the
	// test's clock (Redis's too: one machine) by more than a replica's clock may be off.
	early []string
	// outages are the ids of the outage_started events that arrived.
	outages map[string]bool
	// causes counts the interruptions that arrived by their cause (docs/events.md), copies included.
	causes map[string]int
	// incidents checks every event, with every signal the scenario's devices sent, against the
	// incident's invariants (docs/concepts.md#the-incident).
	incidents *invariant.Checker
}

type recordAt struct {
	topic     string
	partition int32
	offset    int64
}

// deviceEvents is what arrived for one device of one kind.
type deviceEvents struct {
	n     int         // events, all copies
	first event.Event // the first to arrive
}

func newCollector(t *testing.T, k *testenv.Kafka) *collector {
	t.Helper()
	c := &collector{kafka: k, seen: map[recordAt]bool{}, devices: map[event.Kind]map[string]*deviceEvents{},
		deadletters: map[string][]string{}, outages: map[string]bool{}, causes: map[string]int{}, incidents: invariant.New(invariant.Options{InFlight: invariant.InFlightFor(maxLag)})}
	k.Consume(t, c.add, eventsTopic, deadletterTopic)
	return c
}

func (c *collector) add(r testenv.Record) { c.take(r) }

// take takes r in unless it was already; it reports whether it was new.
func (c *collector) take(r testenv.Record) bool {
	read := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	at := recordAt{r.Topic, r.Partition, r.Offset}
	if c.seen[at] {
		return false
	}
	c.seen[at] = true
	if r.Topic == deadletterTopic {
		d, err := event.DecodeDeadLetter(r.Value)
		if err != nil {
			c.bad = append(c.bad, string(r.Value))
			return true
		}
		c.deadletters[d.Topic] = append(c.deadletters[d.Topic], d.Reason)
		return true
	}
	e, err := event.Decode(r.Value)
	if err != nil {
		c.bad = append(c.bad, string(r.Value))
		return true
	}
	c.incidents.Event(e, r.Offset)
	if e.Kind == event.OutageStarted {
		c.outages[e.OutageID] = true
	}
	if e.Kind == event.Interrupted && e.Cause != "" {
		c.causes[e.Cause]++
	}
	if e.Kind == event.Interrupted && (e.At.Before(e.Deadline) || read.Before(e.Deadline.Add(-config.DefaultMaxClockOffset))) {
		c.early = append(c.early, fmt.Sprintf("early %s (deadline %s, raised %s, read %s)", e.ID,
			e.Deadline.Format(time.RFC3339Nano), e.At.Format(time.RFC3339Nano), read.UTC().Format(time.RFC3339Nano)))
	}
	byDevice := c.devices[e.Kind]
	if byDevice == nil {
		byDevice = map[string]*deviceEvents{}
		c.devices[e.Kind] = byDevice
	}
	d := byDevice[e.DeviceID]
	if d == nil {
		d = &deviceEvents{first: e}
		byDevice[e.DeviceID] = d
	}
	d.n++
	return true
}

// firstOf is the first event of kind that arrived for device, if any.
func (c *collector) firstOf(kind event.Kind, device string) (event.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.devices[kind][device]
	if d == nil {
		return event.Event{}, false
	}
	return d.first, true
}

// interruptedBy counts the interruptions that arrived with cause.
func (c *collector) interruptedBy(cause string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.causes[cause]
}

// reported counts the devices of ids with at least one interrupted event.
func (c *collector) reported(ids []string) int { return c.count(event.Interrupted, ids) }

// count counts the devices of ids with at least one event of kind.
func (c *collector) count(kind event.Kind, ids []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		if c.devices[kind][id] != nil {
			n++
		}
	}
	return n
}

// interruptedDevices is how many distinct devices were reported so far.
func (c *collector) interruptedDevices() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.devices[event.Interrupted])
}

// awaitReported waits until every device of ids was reported or within passes; the caller's tally says
// what was missing.
func (c *collector) awaitReported(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	c.await(t, event.Interrupted, ids, within)
}

// await waits until every device of ids has an event of kind or within passes; the caller's tally says
// what was missing.
func (c *collector) await(t *testing.T, kind event.Kind, ids []string, within time.Duration) {
	t.Helper()
	if poll(within, func() bool { return c.count(kind, ids) == len(ids) }) {
		return
	}
	t.Logf("chaos: %d of %d devices have their %s event within %v", c.count(kind, ids), len(ids), kind, within)
	c.reread(t, kind, ids)
}

// reread reads the events topic again from its start, on a client of its own, until every device of ids
// has an event of kind or a few seconds pass, and takes in what the streaming consumer had not: the
// tally counts what heartbeatd published, and a consumer of the test's that fell behind on a partition
// must not pass for a lost event. What it found is logged, so a consumer that misses records shows.
func (c *collector) reread(t *testing.T, kind event.Kind, ids []string) {
	t.Helper()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	found := 0
	recs := c.kafka.ReadUntil(t, eventsTopic, 5*time.Second, func(recs []testenv.Record) bool {
		for _, r := range recs[found:] {
			if e, err := event.Decode(r.Value); err == nil && e.Kind == kind && want[e.DeviceID] {
				delete(want, e.DeviceID)
			}
		}
		found = len(recs)
		return len(want) == 0
	})
	added, partitions := 0, map[int32]int{}
	for _, r := range recs {
		if c.take(r) {
			added++
			partitions[r.Partition]++
		}
	}
	line := fmt.Sprintf("chaos: a second read of %s found %d records the streaming consumer had not delivered (by partition: %v); now %d of %d devices have their %s event",
		eventsTopic, added, partitions, c.count(kind, ids), len(ids), kind)
	t.Log(line)
	fmt.Println(line)
}

// rereadAll reads the events topic again from its start, on a client of its own, and takes in what the
// streaming consumer had not delivered, so the incident checker judges what heartbeatd published rather
// than what one consumer of the test's received. What it found is logged.
func (c *collector) rereadAll(t *testing.T) {
	t.Helper()
	recs := c.kafka.ReadToEnd(t, eventsTopic, time.Minute)
	added := 0
	for _, r := range recs {
		if c.take(r) {
			added++
		}
	}
	line := fmt.Sprintf("chaos: a second read of %s found %d of its %d records the streaming consumer had not delivered", eventsTopic, added, len(recs))
	t.Log(line)
	fmt.Println(line)
}

// tally is one scenario's count.
type tally struct {
	scenario                         string
	devices                          int
	expected, got, lost, falses, dup int
	detail                           []string
	lostIDs                          []string // the first few lost devices, for the daemon to explain
	incidents                        invariant.Report
	// figures are further measurements of the scenario ("name=value"), printed after the counts.
	figures []string
}

// tallyInterrupted counts against the events: expected devices must each have an interrupted event;
// every other device with one is a false interruption, and so is an interruption raised before its
// deadline; dup is every extra copy of an event id.
func (c *collector) tallyInterrupted(scenario string, devices int, expected []string) tally {
	r := c.tally(event.Interrupted, scenario, devices, expected)
	c.mu.Lock()
	defer c.mu.Unlock()
	r.falses += len(c.early)
	for _, e := range c.early[:min(len(c.early), 10)] {
		r.detail = append(r.detail, e)
	}
	return r
}

// tally counts the events of kind: expected devices must each have one; every other device with one is
// false; dup is every extra copy of an event id (of any kind).
func (c *collector) tally(kind event.Kind, scenario string, devices int, expected []string) tally {
	incidents := c.checkIncidents()
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make(map[string]bool, len(expected))
	for _, id := range expected {
		want[id] = true
	}
	got := c.devices[kind]
	r := tally{scenario: scenario, devices: devices, expected: len(expected), incidents: incidents}
	for _, id := range expected {
		if got[id] != nil {
			r.got++
		} else if len(r.detail) < 10 {
			r.detail = append(r.detail, fmt.Sprintf("lost %s of %s", kind, id))
			r.lostIDs = append(r.lostIDs, id)
		}
	}
	for id, d := range got {
		if !want[id] {
			r.falses++
			if len(r.detail) < 20 {
				r.detail = append(r.detail, fmt.Sprintf("false %s of %s (deadline %s, raised %s)", kind, id,
					d.first.Deadline.Format(time.RFC3339Nano), d.first.At.Format(time.RFC3339Nano)))
			}
		}
	}
	r.dup = incidents.Duplicates
	r.lost = r.expected - r.got
	if len(c.bad) > 0 {
		r.detail = append(r.detail, fmt.Sprintf("%d undecodable records, first %q", len(c.bad), c.bad[0]))
	}
	return r
}

// checkIncidents is the incident checker's verdict. A recovered still on its way shows as a violation
// until it arrives, so it waits (a few seconds at most) for a clean verdict before it gives the last one.
func (c *collector) checkIncidents() invariant.Report {
	var r invariant.Report
	poll(15*time.Second, func() bool {
		r = c.incidents.Check()
		return len(r.Violations) == 0
	})
	return r
}

// earlyInterruptions counts the interruptions raised before their deadline.
func (c *collector) earlyInterruptions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.early)
}

// plus counts r and o as one scenario (o's dup is the same count: dup is over every event).
func (r tally) plus(o tally) tally {
	r.expected += o.expected
	r.got += o.got
	r.lost += o.lost
	r.falses += o.falses
	r.detail = append(r.detail, o.detail...)
	r.lostIDs = append(r.lostIDs, o.lostIDs...)
	return r
}

// line is the scenario's one-line summary.
func (r tally) line() string {
	line := fmt.Sprintf("chaos: %s devices=%d expected=%d got=%d lost=%d false=%d dup=%d %s",
		r.scenario, r.devices, r.expected, r.got, r.lost, r.falses, r.dup, r.incidents.Summary())
	for _, f := range r.figures {
		line += " " + f
	}
	return line
}

// report prints the scenario's line (t.Log and stdout, so `make chaos` shows it) and fails the test
// when anything was lost or false, or the incident checker found a broken invariant.
func report(t *testing.T, r tally, logs ...func() string) {
	t.Helper()
	line := r.line()
	t.Log(line)
	fmt.Println(line)
	if r.lost != 0 || r.falses != 0 || len(r.incidents.Violations) != 0 {
		msg := strings.Join(r.detail, "\n") + "\n" + r.incidents.Details(20)
		for _, l := range logs {
			msg += "\n" + l()
		}
		t.Errorf("%s\n%s", line, msg)
	}
}
