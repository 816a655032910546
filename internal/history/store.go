package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Options configures a Store.
type Options struct {
	Client    redis.UniversalClient
	KeyPrefix string
	// History is history.* of the configuration: max_incidents, retention, group_labels.
	History config.History
	// Labels reads the registry labels of devices (registry.Registry.Labels), for the label groupings of
	// History.GroupLabels; nil: none.
	Labels func(ctx context.Context, devices []string) ([]map[string]string, error)
	// Now is the clock the replicas share (holdback.Clock.Now).
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Store keeps the incidents of every device and the per-day figures of availability.
type Store struct {
	opts Options
	keys keyspace
	log  *zap.Logger
	// anomalies counts events the incident machine refused (refused, repaired) and stored values that
	// could not be read (corrupt).
	anomalies *prometheus.CounterVec
	// lag is how old the newest event of the last batch Consume recorded was when recorded.
	lag   prometheus.Gauge
	cache *blobCache
}

// New returns the store.
func New(opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.History.MaxIncidents <= 0 {
		opts.History.MaxIncidents = config.DefaultHistoryMaxIncidents
	}
	if opts.History.Retention <= 0 {
		opts.History.Retention = config.DefaultHistoryRetention
	}
	s := &Store{opts: opts, keys: newKeyspace(opts.KeyPrefix), log: opts.Logger.With(zap.String("component", "history")),
		cache: newBlobCache(blobCacheSize),
		anomalies: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "history_anomalies_total",
			Help: "Events the incident history could not fold as the incident machine says (refused: kept nothing; repaired: " +
				"closed an incident whose close it never saw), stored histories it could not read (corrupt) and records of the events topic " +
				"that are no event (unreadable)."}, []string{"kind"})}
	s.lag = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "history_lag_seconds",
		Help: "How long before it was recorded in the incident history the newest event of the last batch was published: " +
			"the history's delay behind the events topic, on the replica that recorded it."})
	for _, k := range []string{"refused", "repaired", "corrupt", "unreadable"} {
		s.anomalies.WithLabelValues(k)
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.anomalies, s.lag)
	}
	return s
}

// maxRecordAttempts bounds the retries of a device whose history another writer changed meanwhile (an
// operator's ack racing the alarm loop): each retry reads it afresh.
const maxRecordAttempts = 5

// Record folds published events into their devices' incidents. Events about no device (outages,
// watchdog) and those that change no incident (silenced, unsilenced, flapping) are skipped. It is
// idempotent: recording an event again changes nothing. An error leaves some devices unrecorded;
// recording the same events again completes them.
func (s *Store) Record(ctx context.Context, events []event.Event) error {
	byDevice := map[string][]*event.Event{}
	var devices []string
	for i := range events {
		e := &events[i]
		if !event.DeviceKind(e.Kind) || e.DeviceID == "" || e.Kind == event.Silenced || e.Kind == event.Unsilenced || e.Kind == event.Flapping {
			continue
		}
		if _, ok := byDevice[e.DeviceID]; !ok {
			devices = append(devices, e.DeviceID)
		}
		byDevice[e.DeviceID] = append(byDevice[e.DeviceID], e)
	}
	for attempt := 1; len(devices) > 0; attempt++ {
		if attempt > maxRecordAttempts {
			return fmt.Errorf("history: %d devices' histories kept changing while being recorded", len(devices))
		}
		var err error
		// The first attempt folds from what the replica remembers; a retry reads Redis.
		if devices, err = s.record(ctx, devices, byDevice, attempt > 1); err != nil {
			return err
		}
	}
	return nil
}

// change is one device's history before and after its events.
type change struct {
	device   string
	old, new *deviceHistory
	oldRaw   string
	newRaw   string // set by encodeNew
}

// record folds and writes devices once, in one script call per bucket (write.go); it returns those
// another writer changed meanwhile. Unless fresh, each device's history is taken from what this replica
// last wrote or read (blobCache; none: no history), which the write compares with Redis's; fresh reads
// Redis.
func (s *Store) record(ctx context.Context, devices []string, byDevice map[string][]*event.Event, fresh bool) ([]string, error) {
	var raws []string
	if fresh {
		var err error
		if raws, err = s.read(ctx, devices); err != nil {
			return nil, err
		}
	} else {
		raws = s.cache.get(devices)
	}
	labels, err := s.labels(ctx, devices)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now().UnixMilli()
	changes := make([]change, 0, len(devices))
	for i, dev := range devices {
		old, err := decode([]byte(raws[i]))
		if err != nil {
			s.anomalies.WithLabelValues("corrupt").Inc()
			s.log.Error("a device's stored incidents cannot be read; starting them afresh", zap.String("device_id", dev), zap.Error(err))
			old = &deviceHistory{}
		}
		c := change{device: dev, old: old, new: clone(old), oldRaw: raws[i]}
		for _, e := range byDevice[dev] {
			switch fold(c.new, e) {
			case erased:
				c.new = &deviceHistory{}
			case refused:
				s.anomalies.WithLabelValues("refused").Inc()
			case repaired:
				s.anomalies.WithLabelValues("repaired").Inc()
			}
			if len(c.new.Incidents) > 0 && e.DeviceType != "" {
				c.new.setGroups(e.DeviceType, s.opts.History.GroupLabels, labels[i])
			}
		}
		s.trim(c.new, now)
		// Written even when its events changed nothing: the write's compare then checks the remembered
		// value, on which they may have changed nothing where Redis's would change.
		changes = append(changes, c)
	}
	return s.write(ctx, changes, now)
}

func (s *Store) read(ctx context.Context, devices []string) ([]string, error) {
	pipe := s.opts.Client.Pipeline()
	cmds := make([]*redis.StringCmd, len(devices))
	for i, dev := range devices {
		cmds[i] = pipe.Get(ctx, s.keys.device(dev))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("history: read: %w", err)
	}
	out := make([]string, len(devices))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// labels reads the registry labels of devices when a label grouping is kept; nil otherwise.
func (s *Store) labels(ctx context.Context, devices []string) ([]map[string]string, error) {
	if len(s.opts.History.GroupLabels) == 0 || s.opts.Labels == nil {
		return make([]map[string]string, len(devices)), nil
	}
	l, err := s.opts.Labels(ctx, devices)
	if err != nil {
		return nil, fmt.Errorf("history: read labels: %w", err)
	}
	return l, nil
}

// setGroups sets the groupings h's figures are kept under: its type, and each kept label it has.
func (h *deviceHistory) setGroups(typ string, groupLabels []string, labels map[string]string) {
	same := h.Groups[dimType] == typ
	kept := 1
	for _, name := range groupLabels {
		v := labels[name]
		if v != "" {
			kept++
		}
		same = same && h.Groups[labelDim(name)] == v
	}
	if same && len(h.Groups) == kept {
		return // the common case: nothing moved, nothing to allocate
	}
	h.Groups = map[string]string{dimType: typ}
	for _, name := range groupLabels {
		if v := labels[name]; v != "" {
			h.Groups[labelDim(name)] = v
		}
	}
}

// The groupings: by device type, or by a registry label (label.<name>).
const dimType = "device_type"

func labelDim(name string) string { return "label." + name }

// trim drops the incidents closed longer than retention ago, then the oldest beyond max_incidents.
func (s *Store) trim(h *deviceHistory, now int64) {
	cutoff := now - s.opts.History.Retention.Milliseconds()
	kept := h.Incidents[:0]
	for _, in := range h.Incidents {
		if in.Open() || in.Closed >= cutoff {
			kept = append(kept, in)
		}
	}
	if over := len(kept) - s.opts.History.MaxIncidents; over > 0 {
		kept = kept[over:]
	}
	h.Incidents = kept
}

func clone(h *deviceHistory) *deviceHistory {
	c := *h
	c.Incidents = append([]Incident(nil), h.Incidents...)
	return &c
}

// expireAt is when a device's history key goes: retention after its last incident closed; never while
// one is open (its close rewrites it).
func (s *Store) expireAt(h *deviceHistory) int64 {
	var last int64
	for _, in := range h.Incidents {
		if in.Open() {
			return 0
		}
		last = max(last, in.Closed)
	}
	return last + s.opts.History.Retention.Milliseconds()
}

// Forget removes the history and day figures of devices forgotten by retention.forget_after, which
// publishes no deleted event: as for a deleted device, nothing of them is left.
func (s *Store) Forget(ctx context.Context, devices []string) error {
	at := s.opts.Now()
	events := make([]event.Event, len(devices))
	for i, dev := range devices {
		events[i] = event.Event{Kind: event.Deleted, DeviceID: dev, At: at}
	}
	return s.Record(ctx, events)
}
