package chaos

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// collector reads the event and dead-letter topics from the start for the whole scenario.
type collector struct {
	mu          sync.Mutex
	copies      map[string]int         // event id → copies received
	interrupted map[string]int         // device → interrupted events (all copies)
	deadletters map[string][]string    // dead-letter topic field → reasons (all copies)
	kinds       map[event.Kind]int     // events by kind
	bad         []string               // values that did not decode
	first       map[string]event.Event // device → its first interrupted event
}

func newCollector(t *testing.T, k *testenv.Kafka) *collector {
	t.Helper()
	c := &collector{
		copies: map[string]int{}, interrupted: map[string]int{}, deadletters: map[string][]string{},
		kinds: map[event.Kind]int{}, first: map[string]event.Event{},
	}
	k.Consume(t, c.add, eventsTopic, deadletterTopic)
	return c
}

func (c *collector) add(r testenv.Record) {
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
	c.kinds[e.Kind]++
	if e.Kind == event.Interrupted {
		if c.interrupted[e.DeviceID] == 0 {
			c.first[e.DeviceID] = e
		}
		c.interrupted[e.DeviceID]++
	}
}

// reported counts the devices of ids with at least one interrupted event.
func (c *collector) reported(ids []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		if c.interrupted[id] > 0 {
			n++
		}
	}
	return n
}

// interruptedDevices is how many distinct devices were reported so far.
func (c *collector) interruptedDevices() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.interrupted)
}

// awaitReported waits until every device of ids was reported or within passes; the caller's tally says
// what was missing.
func (c *collector) awaitReported(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	if !poll(within, func() bool { return c.reported(ids) == len(ids) }) {
		t.Logf("chaos: %d of %d devices reported within %v", c.reported(ids), len(ids), within)
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
// every other device with one is a false interruption; dup is every extra copy of an event id.
func (c *collector) tallyInterrupted(scenario string, devices int, expected []string) tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make(map[string]bool, len(expected))
	for _, id := range expected {
		want[id] = true
	}
	r := tally{scenario: scenario, devices: devices, expected: len(expected)}
	for _, id := range expected {
		if c.interrupted[id] > 0 {
			r.got++
		} else if len(r.detail) < 10 {
			r.detail = append(r.detail, "lost "+id)
		}
	}
	for id := range c.interrupted {
		if !want[id] {
			r.falses++
			if len(r.detail) < 20 {
				e := c.first[id]
				r.detail = append(r.detail, fmt.Sprintf("false %s (deadline %s, raised %s)", id,
					e.Deadline.Format(time.RFC3339Nano), e.At.Format(time.RFC3339Nano)))
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
