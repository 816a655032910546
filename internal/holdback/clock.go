package holdback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// ClockOptions configures a Clock.
type ClockOptions struct {
	Client redis.UniversalClient
	// Local is this machine's clock (default time.Now); tests skew it.
	Local func() time.Time
	// Every is how often the offset is measured again (default 10s).
	Every time.Duration
	// Samples is how many TIME round trips one measurement takes; the one with the shortest round trip
	// wins, since its midpoint is the closest to when Redis read its clock (default 5).
	Samples int
	// MaxOffset is detection.max_clock_offset (default config.DefaultMaxClockOffset).
	MaxOffset time.Duration
	Logger    *zap.Logger
	// Registerer gets heartbeatd_clock_offset_seconds; nil = not registered.
	Registerer prometheus.Registerer
}

// Clock is the one clock every replica shares: the local clock corrected by its offset from Redis TIME.
// Leases, alive marks, blind windows and deadlines all use it, so replicas whose own clocks disagree still
// agree on what is stale and what is due. A replica whose offset exceeds MaxOffset keeps the corrected
// clock but stops scanning (Check, Tracker): a clock that far off may step at any moment.
type Clock struct {
	opts ClockOptions
	log  *zap.Logger

	mu       sync.Mutex
	offset   time.Duration
	rtt      time.Duration
	measured bool
	beyond   bool // the last measurement exceeded MaxOffset (for logging changes)
}

// NewClock returns a clock that reads the local time until Measure succeeds.
func NewClock(opts ClockOptions) *Clock {
	if opts.Local == nil {
		opts.Local = time.Now
	}
	if opts.Every <= 0 {
		opts.Every = 10 * time.Second
	}
	if opts.Samples <= 0 {
		opts.Samples = 5
	}
	if opts.MaxOffset <= 0 {
		opts.MaxOffset = config.DefaultMaxClockOffset
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	c := &Clock{opts: opts, log: opts.Logger.With(zap.String("component", "clock"))}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "clock_offset_seconds",
			Help: "Redis TIME minus this replica's clock, as last measured (corrected for half the round trip)."},
			func() float64 { return c.measuredOffset().Seconds() }))
	}
	return c
}

// Now is the shared time: the local clock plus the measured offset. It keeps the local monotonic
// reading, so durations between two Now values are not disturbed by a re-measured offset.
func (c *Clock) Now() time.Time { return c.opts.Local().Add(c.measuredOffset()) }

// measuredOffset is Redis TIME minus the local clock, as last measured (0 before the first measurement).
func (c *Clock) measuredOffset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Shared converts a time read from the local clock (a source's "since") to the shared clock.
func (c *Clock) Shared(local time.Time) time.Time {
	if local.IsZero() {
		return local
	}
	return local.Add(c.measuredOffset())
}

// Check is nil while this replica may scan: its offset was measured and is within MaxOffset. The error
// names the offset, for /readyz and the log.
func (c *Clock) Check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.measured:
		return errors.New("holdback: clock offset from Redis TIME not measured yet")
	case c.offset.Abs() > c.opts.MaxOffset:
		return fmt.Errorf("holdback: clock offset %s from Redis TIME exceeds detection.max_clock_offset %s: this replica does not scan",
			signed(c.offset), c.opts.MaxOffset)
	}
	return nil
}

// Measure samples Redis TIME and keeps the offset of the sample with the shortest round trip. A failed
// measurement keeps the previous offset.
func (c *Clock) Measure(ctx context.Context) error {
	var best, bestRTT time.Duration
	var errs []error
	for range c.opts.Samples {
		sent := c.opts.Local()
		redisTime, err := c.opts.Client.Time(ctx).Result()
		received := c.opts.Local()
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		rtt := received.Sub(sent)
		off := redisTime.Sub(sent.Add(rtt / 2))
		if bestRTT == 0 || rtt < bestRTT {
			best, bestRTT = off, max(rtt, time.Nanosecond)
		}
	}
	if bestRTT == 0 {
		return fmt.Errorf("holdback: measure the clock offset: %w", errors.Join(errs...))
	}
	c.mu.Lock()
	first := !c.measured
	c.offset, c.rtt, c.measured = best, bestRTT, true
	beyond := best.Abs() > c.opts.MaxOffset
	changed := beyond != c.beyond
	c.beyond = beyond
	c.mu.Unlock()
	fields := []zap.Field{zap.String("offset", signed(best)), zap.Duration("round_trip", bestRTT), zap.Duration("max_clock_offset", c.opts.MaxOffset)}
	switch {
	case beyond && (first || changed):
		c.log.Error("clock too far from Redis TIME: this replica stops scanning", fields...)
	case !beyond && changed && !first:
		c.log.Info("clock back within detection.max_clock_offset of Redis TIME: scanning again", fields...)
	case first:
		c.log.Info("clock offset from Redis TIME measured", fields...)
	}
	return nil
}

// Run measures every Every until ctx is done; failures back off and keep the last offset.
func (c *Clock) Run(ctx context.Context) error {
	loop.Every(ctx, loop.Options{Interval: c.opts.Every, MaxBackoff: time.Minute,
		OnError: func(err error, failures int, _ time.Duration) {
			if failures == 1 {
				c.log.Warn("measuring the clock offset failed; keeping the last one", zap.Error(err))
			}
		}}, c.Measure)
	return nil
}

// signed writes an offset with its sign, so "+2s" (Redis ahead of us) and "-7s" read unambiguously.
func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}
