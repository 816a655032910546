package config

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Coordinator owns the running configuration: it (re)loads the file, tells subscribers, and keeps the
// last good configuration when a reload fails. Modelled on alertmanager's config coordinator.
//
// Only `types` and `time_intervals` change at runtime (docs/configuration.md). The Config a reload hands out is the
// running one with the new types and intervals, so Current always describes what the process actually does.
type Coordinator struct {
	path   string
	env    func(string) (string, bool)
	logger *zap.Logger

	mu          sync.Mutex // serialises reloads and subscribers
	subscribers []func(*Config) error
	current     atomic.Pointer[Config] // read without mu, so a subscriber may call Current

	lastSuccess     prometheus.Gauge
	lastSuccessTime prometheus.Gauge
}

// NewCoordinator returns a coordinator for the file at path, looking up HEARTBEATD_* overrides with env
// (nil: none; the daemon passes os.LookupEnv). It registers its gauges with reg unless reg is nil.
// initial, when not nil, is the configuration the caller already loaded from path and env: it is the
// running one from the start, as if a first Reload had accepted it, so the file is read once at start-up.
// With nil, nothing is loaded until the first Reload.
func NewCoordinator(path string, env func(string) (string, bool), logger *zap.Logger, reg prometheus.Registerer,
	initial *Config) *Coordinator {
	if logger == nil {
		logger = zap.NewNop()
	}
	c := &Coordinator{
		path:   path,
		env:    env,
		logger: logger.With(zap.String("component", "config")),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heartbeatd_config_last_reload_successful",
			Help: "Whether the last configuration reload succeeded (1) or was rejected (0).",
		}),
		lastSuccessTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "heartbeatd_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration reload.",
		}),
	}
	if reg != nil {
		reg.MustRegister(c.lastSuccess, c.lastSuccessTime)
	}
	if initial != nil {
		c.adopt(initial)
	}
	return c
}

// Subscribe adds fn, called with every configuration a Reload accepts, in subscription order. A
// subscriber must not modify the Config. An error from any subscriber fails the reload, but
// subscribers before it have already applied it: a subscriber should only swap in what it built
// without error (the configuration itself has been validated).
func (c *Coordinator) Subscribe(fn func(*Config) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subscribers = append(c.subscribers, fn)
}

// Current is the running configuration, nil before the first successful Reload unless NewCoordinator
// was given one. Read-only.
func (c *Coordinator) Current() *Config { return c.current.Load() }

// Reload loads the file. On success every subscriber gets the new configuration and it becomes
// Current; on failure the running one stays, the error is logged and returned, and
// heartbeatd_config_last_reload_successful drops to 0.
func (c *Coordinator) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()

	next, err := LoadEnv(c.path, c.env)
	if err == nil {
		next, err = c.runtimeChange(next)
	}
	if err == nil {
		var errs []error
		for _, fn := range c.subscribers {
			if serr := fn(next); serr != nil {
				errs = append(errs, serr)
			}
		}
		if len(errs) > 0 {
			err = fmt.Errorf("config: applying the configuration failed: %w", errors.Join(errs...))
		}
	}
	if err != nil {
		c.lastSuccess.Set(0)
		msg := "configuration rejected"
		if c.current.Load() != nil {
			msg = "configuration reload rejected; keeping the running configuration"
		}
		c.logger.Error(msg, zap.String("file", c.path), zap.Error(err))
		return err
	}
	c.adopt(next)
	return nil
}

// adopt makes an accepted configuration the running one.
func (c *Coordinator) adopt(next *Config) {
	c.current.Store(next)
	c.lastSuccess.Set(1)
	c.lastSuccessTime.SetToCurrentTime()
	c.logger.Info("configuration loaded", zap.String("file", c.path), zap.Int("types", len(next.Types)))
}

// runtimeChange turns a freshly loaded configuration into the one the running process can adopt: the
// running configuration with the new types. Keys that would need a restart are named in a warning.
func (c *Coordinator) runtimeChange(next *Config) (*Config, error) {
	cur := c.current.Load()
	if cur == nil {
		return next, nil
	}
	if changed := ChangedKeys(cur, next); len(changed) > 0 {
		var restart []string
		for _, k := range changed {
			if k != "types" && k != "time_intervals" {
				restart = append(restart, k)
			}
		}
		if len(restart) > 0 {
			c.logger.Warn("changed keys take effect only after a restart; applying types and time_intervals only",
				zap.String("file", c.path), zap.Strings("keys", restart))
		}
	}
	eff := cur.Clone()
	eff.Types = next.Clone().Types
	eff.TimeIntervals = next.Clone().TimeIntervals // the types' quiet and active hours name them
	// The new types were validated against the new file's other keys; they must also fit the running
	// ones (ingest.coalesce shorter than every timeout).
	if err := eff.Validate(); err != nil {
		return nil, fmt.Errorf("config: the new types do not fit the running configuration (restart to apply everything): %w", err)
	}
	return eff, nil
}

// ChangedKeys lists the dotted keys whose values differ between a and b, down to the leaves ("types"
// as a whole, lists as a whole). Secrets are named, never shown.
func ChangedKeys(a, b *Config) []string {
	var out []string
	diffWalk(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), "", &out)
	return out
}

func diffWalk(a, b reflect.Value, path string, out *[]string) {
	if a.Kind() == reflect.Struct {
		t := a.Type()
		for i := range t.NumField() {
			if name := yamlName(t.Field(i)); name != "" {
				diffWalk(a.Field(i), b.Field(i), join(path, name), out)
			}
		}
		return
	}
	if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
		return // `tokens: []` written out is no change from none
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		*out = append(*out, path)
	}
}
