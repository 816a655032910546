package correlate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/lease"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The alarm loop asks for the groups' open outages before deciding (Correlator.Open), then records
// every `interrupted` in each of the device's groups, opening an outage that reaches its threshold
// (Correlator.Join, join.go): a member's `interrupted` then carries the outage id, and its repeats wait
// while the outage lasts. One replica at a time (a Redis lease) runs the correlator's tick: it announces
// an outage whose opener died before announcing it, and ends one when fewer than half of its members
// (those that opened it and those interrupted since) are still silent: an outage seen early from its
// first members ends with the whole of it, not with its first count. Everything lives in Redis, so a
// replica's death costs at most one lease.

// Options configures a Correlator.
type Options struct {
	Client      redis.UniversalClient
	Store       *deadline.Store
	Correlation config.Correlation
	// Sink publishes outage_started and outage_ended (the alarm loop's sink).
	Sink      event.Sink
	ReplicaID string
	// Labels returns the labels of devices, for labels.<name> groups (nil: none known).
	Labels func(ctx context.Context, devices []string) ([]map[string]string, error)
	Now    func() time.Time
	Logger *zap.Logger
	// KeyPrefix is redis.key_prefix ("" = its default); the correlator's keys are its own (keys.go).
	KeyPrefix string
	// Events counts the outage events by kind (heartbeatd_events_total, the alarm loop's series, which
	// counts every event); nil: a series of its own, not registered.
	Events *prometheus.CounterVec
	// Metrics are the correlator's series (NewMetrics); nil: series of its own, not registered.
	Metrics *Metrics
}

// Metrics are the correlator's Prometheus series (docs/metrics.md).
type Metrics struct {
	// OutagesOpen shows the open outages.
	OutagesOpen prometheus.Gauge
}

// NewMetrics creates the correlator's series and registers them with reg (nil = not registered). The
// daemon registers them while correlation is off too, at 0, so alerts and dashboards on them need no
// "absent" case.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{OutagesOpen: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "outages_open",
		Help: "Correlated outages open now; 0 while correlation is off (docs/concepts.md)."})}
	if reg != nil {
		reg.MustRegister(m.OutagesOpen)
	}
	return m
}

// Correlator groups interruptions into outages; nil-safe: a nil *Correlator correlates nothing.
type Correlator struct {
	opts Options
	keys keyspace
	log  *zap.Logger

	mu        sync.Mutex
	lastCheck map[string]time.Time // group → when its open outage was last checked for its end
}

// correlatorTick is how often the correlator looks at the groups; correlatorLease how long its lease
// outlives the last renewal (another replica takes over after it).
const (
	correlatorTick  = 250 * time.Millisecond
	correlatorLease = 3 * time.Second
	// endCheckEvery is how often an open outage's members are counted.
	endCheckEvery = time.Second
	// groupsPerTick bounds the groups one tick looks at.
	groupsPerTick = 1000
	// sampleSize is how many device ids an outage event carries (docs/events.md).
	sampleSize = 20
	// recentOutages is how many ended outages GET /v1/outages lists.
	recentOutages = 50
	// membersPage bounds one read of an outage's members.
	membersPage = 5000
)

// New returns a correlator, or nil when correlation is off.
func New(opts Options) *Correlator {
	if !opts.Correlation.Enabled() {
		return nil
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Events == nil {
		opts.Events = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_total"}, []string{"kind"})
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &Correlator{opts: opts, keys: newKeyspace(opts.KeyPrefix), log: opts.Logger.With(zap.String("component", "correlator")),
		lastCheck: map[string]time.Time{}}
}

// groupKey is a group's name in Redis and in its outage's device id: "<by>:<value>".
func groupKey(by, value string) string { return by + ":" + value }

func splitGroup(g string) event.Group {
	by, value, _ := strings.Cut(g, ":")
	return event.Group{By: by, Value: value}
}

// groups returns a device's groups: one per correlation key it has a value for.
func (c *Correlator) groups(typ, parent string, labels map[string]string) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, by := range c.opts.Correlation.By {
		var v string
		switch {
		case by == config.CorrelateByType:
			v = typ
		case by == config.CorrelateByParent:
			v = parent
		default:
			v = labels[strings.TrimPrefix(by, config.CorrelateByLabel)]
		}
		if v != "" {
			out = append(out, groupKey(by, v))
		}
	}
	return out
}

// GroupWait is correlation.group_wait: how long a new interruption waits while its groups may still
// become an outage (0 = none, and with correlation off).
func (c *Correlator) GroupWait() time.Duration {
	if c == nil {
		return 0
	}
	return c.opts.Correlation.GroupWait
}

// WantsParents reports whether groups need the devices' parents.
func (c *Correlator) WantsParents() bool {
	if c == nil {
		return false
	}
	for _, by := range c.opts.Correlation.By {
		if by == config.CorrelateByParent {
			return true
		}
	}
	return false
}

// labels returns the labels of devices when a group needs them (nil otherwise).
func (c *Correlator) labels(ctx context.Context, devices []string) ([]map[string]string, error) {
	if c == nil || c.opts.Labels == nil {
		return nil, nil
	}
	for _, by := range c.opts.Correlation.By {
		if strings.HasPrefix(by, config.CorrelateByLabel) {
			return c.opts.Labels(ctx, devices)
		}
	}
	return nil, nil
}

// Open returns the id of each group's open outage, for the groups that have one; one round trip.
func (c *Correlator) Open(ctx context.Context, groups []string) (map[string]string, error) {
	out := map[string]string{}
	if c == nil || len(groups) == 0 {
		return out, nil
	}
	pipe := c.opts.Client.Pipeline()
	cmds := make([]*redis.StringCmd, len(groups))
	for i, g := range groups {
		cmds[i] = pipe.HGet(ctx, c.keys.outage(g), "id")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("correlate: open outages: %w", err)
	}
	for i, g := range groups {
		if id, err := cmds[i].Result(); err == nil {
			out[g] = id
		}
	}
	return out, nil
}

// Outage is one correlated outage as GET /v1/outages shows it.
type Outage struct {
	ID        string      `json:"id"`
	Group     event.Group `json:"group"`
	State     string      `json:"state"` // "open" or "ended"
	StartedAt time.Time   `json:"started_at"`
	EndedAt   *time.Time  `json:"ended_at,omitempty"`
	// Count is how many devices were interrupted within the window when it started; Members the larger
	// of that and the devices of the group interrupted within the window before it or since, when it was
	// last looked at; Silent how many of them were still silent then. It ends when 2 × Silent < Members.
	Count   int      `json:"count"`
	Members int      `json:"members"`
	Silent  int      `json:"silent"`
	Sample  []string `json:"sample"`
}

// Outages returns the open outages and the last ended ones, newest first.
func (c *Correlator) Outages(ctx context.Context) ([]Outage, error) {
	if c == nil {
		return []Outage{}, nil
	}
	open, err := c.opts.Client.HVals(ctx, c.keys.open()).Result()
	if err != nil {
		return nil, fmt.Errorf("correlate: outages: %w", err)
	}
	recent, err := c.opts.Client.LRange(ctx, c.keys.recent(), 0, recentOutages-1).Result()
	if err != nil {
		return nil, fmt.Errorf("correlate: outages: %w", err)
	}
	out := make([]Outage, 0, len(open)+len(recent))
	for _, v := range append(open, recent...) {
		var o Outage
		if err := json.Unmarshal([]byte(v), &o); err == nil {
			o.Members = max(o.Members, o.Count) // stored before members were recorded: its count is its floor
			out = append(out, o)
		}
	}
	sortOutages(out)
	return out, nil
}

// sortOutages orders outages open first, then newest first.
func sortOutages(out []Outage) {
	slices.SortStableFunc(out, func(a, b Outage) int {
		if (a.State == "open") != (b.State == "open") {
			if a.State == "open" {
				return -1
			}
			return 1
		}
		return b.StartedAt.Compare(a.StartedAt)
	})
}

// Run keeps the lease and, while this replica holds it, opens and ends outages; it returns when ctx ends.
func (c *Correlator) Run(ctx context.Context) error {
	if c == nil {
		return nil
	}
	defer c.release()
	loop.Every(ctx, loop.Options{Interval: correlatorTick, MaxBackoff: 5 * time.Second,
		OnError: func(err error, failures int, retryIn time.Duration) {
			if failures == 1 || failures%20 == 0 {
				c.log.Warn("correlating interruptions failed; retrying", zap.Error(err), zap.Duration("retry_in", retryIn))
			}
		}}, c.tick)
	return nil
}

// release gives the correlator's lease up if this replica holds it, so a graceful stop hands over at once.
func (c *Correlator) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = c.tickLease().Release(ctx, c.opts.Client)
}

// tickLease is this replica's lease on the correlator's tick (internal/lease).
func (c *Correlator) tickLease() lease.Lease {
	return lease.Lease{Key: c.keys.lease(), Holder: c.opts.ReplicaID}
}

// Tick runs one round of Run at once: for callers that drive time themselves (tests on a fake clock).
func (c *Correlator) Tick(ctx context.Context) error { return c.tick(ctx) }

func (c *Correlator) tick(ctx context.Context) error {
	held, err := c.tickLease().Take(ctx, c.opts.Client, correlatorLease)
	if err != nil {
		return fmt.Errorf("correlate: correlator lease: %w", err)
	}
	if held {
		if err := c.lookAll(ctx); err != nil {
			return err
		}
	}
	// After looking: the open outages as this tick left them.
	n, err := c.opts.Client.HLen(ctx, c.keys.open()).Result()
	if err != nil {
		return fmt.Errorf("correlate: outages open: %w", err)
	}
	c.opts.Metrics.OutagesOpen.Set(float64(n))
	return nil
}

// lookAll looks at the groups interrupted lately, oldest first, at most groupsPerTick of them.
func (c *Correlator) lookAll(ctx context.Context) error {
	now := c.opts.Now()
	window := c.opts.Correlation.Window
	groups, err := c.opts.Client.ZRangeArgs(ctx, redis.ZRangeArgs{Key: c.keys.groups(), ByScore: true,
		Start: "-inf", Stop: "+inf", Count: groupsPerTick}).Result()
	if err != nil {
		return fmt.Errorf("correlate: correlated groups: %w", err)
	}
	for _, g := range groups {
		if err := c.look(ctx, g, now, window); err != nil {
			return err
		}
	}
	return nil
}

// look announces, checks or ends one group's outage, and forgets a quiet group. It never opens one:
// Join does, atomically with the interruption that reaches the threshold.
func (c *Correlator) look(ctx context.Context, g string, now time.Time, window time.Duration) error {
	rdb := c.opts.Client
	since := strconv.FormatInt(now.Add(-window).UnixMilli(), 10)
	state, err := rdb.HGetAll(ctx, c.keys.outage(g)).Result()
	if err != nil {
		return fmt.Errorf("correlate: outage %s: %w", g, err)
	}
	if len(state) == 0 {
		// No outage: keep only the window's interruptions.
		if err := rdb.ZRemRangeByScore(ctx, c.keys.correlated(g), "-inf", "("+since).Err(); err != nil {
			return fmt.Errorf("correlate: outage %s: %w", g, err)
		}
		n, err := rdb.ZCard(ctx, c.keys.correlated(g)).Result()
		if err != nil {
			return fmt.Errorf("correlate: outage %s: %w", g, err)
		}
		if n == 0 {
			return rdb.ZRem(ctx, c.keys.groups(), g).Err()
		}
		return nil
	}
	o, err := decodeOutage(state)
	if err != nil {
		return err
	}
	if state["announced"] != "1" {
		if lease, _ := strconv.ParseInt(state["announcing"], 10, 64); lease > now.UnixMilli() {
			return nil // a member's batch is announcing it (Join)
		}
		return c.announce(ctx, g, o) // opened, but the event may not have reached Kafka: at least once
	}
	c.mu.Lock()
	due := now.Sub(c.lastCheck[g]) >= endCheckEvery
	if due {
		c.lastCheck[g] = now
	}
	c.mu.Unlock()
	if !due {
		return nil
	}
	return c.checkEnd(ctx, g, o, now)
}

func decodeOutage(state map[string]string) (Outage, error) {
	var o Outage
	if err := json.Unmarshal([]byte(state["view"]), &o); err != nil {
		return o, fmt.Errorf("correlate: outage state: %w", err)
	}
	return o, nil
}

// outageEvent is outage_started or outage_ended for o, keyed by its group.
func outageEvent(kind event.Kind, o Outage, at time.Time) event.Event {
	group := o.Group
	e := event.New(kind, "outage:"+groupKey(group.By, group.Value), "", o.StartedAt, time.Time{}, at, 0)
	e.OutageID, e.Group, e.Count, e.Sample = o.ID, &group, o.Silent, o.Sample
	if kind == event.OutageStarted {
		e.Count, e.At = o.Count, o.StartedAt // the same event every time it is announced again
	}
	return e
}

// publish sends one outage event and, once Kafka took it, counts it like the alarm loop's events.
func (c *Correlator) publish(ctx context.Context, e event.Event) error {
	if err := c.opts.Sink.Publish(ctx, []event.Event{e})[0]; err != nil {
		return err
	}
	c.opts.Events.WithLabelValues(string(e.Kind)).Inc()
	return nil
}

func (c *Correlator) announce(ctx context.Context, g string, o Outage) error {
	if err := c.publish(ctx, outageEvent(event.OutageStarted, o, o.StartedAt)); err != nil {
		return fmt.Errorf("correlate: publish outage_started %s: %w", o.ID, err)
	}
	return c.opts.Client.HSet(ctx, c.keys.outage(g), "announced", "1").Err()
}

// checkEnd counts the outage's members still silent, and ends it when fewer than half of its members are:
// of the larger of its count at the start and the members recorded since (every member interrupted
// within the window before it or after it), so members that joined late and returned count too.
func (c *Correlator) checkEnd(ctx context.Context, g string, o Outage, now time.Time) error {
	rdb := c.opts.Client
	from := strconv.FormatInt(o.StartedAt.Add(-c.opts.Correlation.Window).UnixMilli(), 10)
	var silent []string
	var offset int64
	gathered := 0
	for {
		members, err := rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: c.keys.correlated(g), ByScore: true, Start: from, Stop: "+inf",
			Offset: offset, Count: membersPage}).Result()
		if err != nil {
			return fmt.Errorf("correlate: outage %s members: %w", g, err)
		}
		gathered += len(members)
		still, err := c.opts.Store.Silent(ctx, members)
		if err != nil {
			return err
		}
		for i, s := range still {
			if s {
				silent = append(silent, members[i])
			}
		}
		if len(members) < membersPage {
			break
		}
		offset += membersPage
	}
	o.Silent = len(silent)
	o.Sample = silent[:min(len(silent), sampleSize)]
	o.Members = max(o.Count, gathered)
	if 2*o.Silent >= o.Members {
		view, _ := json.Marshal(o)
		return rdb.HSet(ctx, c.keys.open(), o.ID, string(view)).Err()
	}
	at := now.UTC().Truncate(time.Millisecond)
	if err := c.publish(ctx, outageEvent(event.OutageEnded, o, at)); err != nil {
		return fmt.Errorf("correlate: publish outage_ended %s: %w", o.ID, err)
	}
	o.State, o.EndedAt = "ended", &at
	view, _ := json.Marshal(o)
	pipe := rdb.Pipeline() // keys of several hash slots: no transaction on Redis Cluster
	pipe.Del(ctx, c.keys.outage(g))
	pipe.HDel(ctx, c.keys.open(), o.ID)
	pipe.LPush(ctx, c.keys.recent(), string(view))
	pipe.LTrim(ctx, c.keys.recent(), 0, recentOutages-1)
	// Its members' interruptions are spent: left in the window they would open a new outage at once.
	pipe.Del(ctx, c.keys.correlated(g))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("correlate: end outage %s: %w", g, err)
	}
	c.mu.Lock()
	delete(c.lastCheck, g)
	c.mu.Unlock()
	c.log.Info("correlated outage ended", zap.String("outage_id", o.ID), zap.Int("still_silent", o.Silent), zap.Int("count", o.Count),
		zap.Int("members", o.Members))
	return nil
}
