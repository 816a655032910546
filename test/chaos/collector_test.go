package chaos

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// collector reads the event and dead-letter topics from the start for the whole scenario.
type collector struct {
	mu          sync.Mutex
	copies      map[string]int                          // event id → copies received
	devices     map[event.Kind]map[string]*deviceEvents // kind → device → its events of that kind
	deadletters map[string][]string                     // dead-letter topic field → reasons (all copies)
	bad         []string                                // values that did not decode
	// early are interruptions raised before their deadline (heartbeatd's at) or read before it on the
	// test's clock (Redis's too: one machine) by more than a replica's clock may be off.
	early []string
}

// deviceEvents is what arrived for one device of one kind.
type deviceEvents struct {
	n     int         // events, all copies
	first event.Event // the first to arrive
}

func newCollector(t *testing.T, k *testenv.Kafka) *collector {
	t.Helper()
	c := &collector{copies: map[string]int{}, devices: map[event.Kind]map[string]*deviceEvents{}, deadletters: map[string][]string{}}
	k.Consume(t, c.add, eventsTopic, deadletterTopic)
	return c
}

func (c *collector) add(r testenv.Record) {
	read := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Topic == deadletterTopic {
		d, err := event.DecodeDeadLetter(r.Value)
		if err != nil {
			c.bad = append(c.bad, string(r.Value))
			return
		}
		c.deadletters[d.Topic] = append(c.deadletters[d.Topic], d.Reason)
		return
	}
	e, err := event.Decode(r.Value)
	if err != nil {
		c.bad = append(c.bad, string(r.Value))
		return
	}
	c.copies[e.ID]++
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
	if !poll(within, func() bool { return c.count(kind, ids) == len(ids) }) {
		t.Logf("chaos: %d of %d devices have their %s event within %v", c.count(kind, ids), len(ids), kind, within)
	}
}

// tally is one scenario's count.
type tally struct {
	scenario                         string
	devices                          int
	expected, got, lost, falses, dup int
	detail                           []string
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
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make(map[string]bool, len(expected))
	for _, id := range expected {
		want[id] = true
	}
	got := c.devices[kind]
	r := tally{scenario: scenario, devices: devices, expected: len(expected)}
	for _, id := range expected {
		if got[id] != nil {
			r.got++
		} else if len(r.detail) < 10 {
			r.detail = append(r.detail, fmt.Sprintf("lost %s of %s", kind, id))
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
	for _, n := range c.copies {
		r.dup += n - 1
	}
	r.lost = r.expected - r.got
	if len(c.bad) > 0 {
		r.detail = append(r.detail, fmt.Sprintf("%d undecodable records, first %q", len(c.bad), c.bad[0]))
	}
	return r
}

// plus counts r and o as one scenario (o's dup is the same count: dup is over every event).
func (r tally) plus(o tally) tally {
	r.expected += o.expected
	r.got += o.got
	r.lost += o.lost
	r.falses += o.falses
	r.detail = append(r.detail, o.detail...)
	return r
}

// line is the scenario's one-line summary.
func (r tally) line() string {
	return fmt.Sprintf("chaos: %s devices=%d expected=%d got=%d lost=%d false=%d dup=%d",
		r.scenario, r.devices, r.expected, r.got, r.lost, r.falses, r.dup)
}

// report prints the scenario's line (t.Log and stdout, so `make chaos` shows it) and fails the test
// when anything was lost or false.
func report(t *testing.T, r tally, logs ...func() string) {
	t.Helper()
	line := r.line()
	t.Log(line)
	fmt.Println(line)
	if r.lost != 0 || r.falses != 0 {
		msg := strings.Join(r.detail, "\n")
		for _, l := range logs {
			msg += "\n" + l()
		}
		t.Errorf("%s\n%s", line, msg)
	}
}
