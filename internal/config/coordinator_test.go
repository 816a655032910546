package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

type coordFixture struct {
	path string
	c    *Coordinator
	reg  *prometheus.Registry
	t    *testing.T
	logs *observer.ObservedLogs
	seen []*Config
}

func newCoordFixture(t *testing.T, initial string, env map[string]string) *coordFixture {
	t.Helper()
	f := &coordFixture{t: t, path: filepath.Join(t.TempDir(), "heartbeatd.yaml")}
	f.write(t, initial)
	core, logs := observer.New(zapcore.InfoLevel)
	f.logs = logs
	f.reg = prometheus.NewRegistry()
	f.c = NewCoordinator(f.path, envMap(env), zap.New(core), f.reg, nil)
	f.c.Subscribe(func(c *Config) error { f.seen = append(f.seen, c); return nil })
	return f
}

func (f *coordFixture) write(t *testing.T, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(f.path, []byte(content), 0o600))
}

func (f *coordFixture) successful() float64 {
	return gauge(f.t, f.reg, "heartbeatd_config_last_reload_successful")
}

// gauge reads a gauge through the registry, so the test also proves its registered name.
// (prometheus/testutil would need a module go.sum does not have.)
func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() == name {
			require.Equal(t, dto.MetricType_GAUGE, mf.GetType())
			require.Len(t, mf.GetMetric(), 1)
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func timeout(t *testing.T, c *Config, typ string) time.Duration {
	t.Helper()
	p, known := c.Policies().Lookup(typ)
	require.True(t, known, typ)
	return p.Timeout
}

func TestCoordinatorKeepsOldConfigOnBadFile(t *testing.T) {
	f := newCoordFixture(t, "types: {default: {timeout: 30s}}\n", nil)
	assert.Nil(t, f.c.Current())

	before := time.Now().Unix()
	require.NoError(t, f.c.Reload())
	after := time.Now().Unix()
	first := f.c.Current()
	require.NotNil(t, first)
	assert.Equal(t, 30*time.Second, timeout(t, first, "default"))
	assert.Equal(t, 1.0, f.successful())
	ts := gauge(t, f.reg, "heartbeatd_config_last_reload_success_timestamp_seconds")
	assert.True(t, float64(before) <= ts && ts < float64(after+1), "timestamp %v not within the reload", ts)
	assert.Equal(t, []*Config{first}, f.seen)

	for _, bad := range []string{
		"types: {default: {timeout: 0s}}\n", // invalid
		"types: {default: {timout: 1s}}\n",  // unknown key
		"types: [\n",                        // not YAML
	} {
		f.write(t, bad)
		require.Error(t, f.c.Reload(), bad)
		assert.Same(t, first, f.c.Current(), "the running configuration stays")
		assert.Equal(t, 0.0, f.successful())
		assert.Len(t, f.seen, 1, "subscribers hear only of good configurations")
	}
	assert.Equal(t, 3, f.logs.FilterMessage("configuration reload rejected; keeping the running configuration").Len())

	f.write(t, "types: {default: {timeout: 45s}}\n")
	require.NoError(t, f.c.Reload())
	assert.Equal(t, 45*time.Second, timeout(t, f.c.Current(), "default"))
	assert.Equal(t, 1.0, f.successful())
	assert.Len(t, f.seen, 2)
}

func TestCoordinatorAppliesOnlyTypes(t *testing.T) {
	f := newCoordFixture(t, "types: {default: {}}\nredis: {slots: 64}\n", map[string]string{"HEARTBEATD_HTTP_TOKEN": "env-token"})
	require.NoError(t, f.c.Reload())
	assert.Equal(t, "env-token", f.c.Current().HTTP.Token, "the environment applies")

	f.write(t, "types: {default: {}, gateway: {timeout: 5s}}\nredis: {slots: 128}\ndetection: {batch: 64}\n")
	require.NoError(t, f.c.Reload())
	cur := f.c.Current()
	assert.Equal(t, 5*time.Second, timeout(t, cur, "gateway"), "types apply at runtime")
	assert.Equal(t, 64, cur.Redis.Slots, "other keys wait for a restart")
	assert.Equal(t, DefaultDetectionBatch, cur.Detection.Batch)

	warn := f.logs.FilterMessage("changed keys take effect only after a restart; applying types and time_intervals only").All()
	require.Len(t, warn, 1)
	assert.Equal(t, zapcore.WarnLevel, warn[0].Level)
	assert.Equal(t, []any{"redis.slots", "detection.batch"}, warn[0].ContextMap()["keys"])
	assert.Equal(t, "config", warn[0].ContextMap()["component"])
}

func TestCoordinatorRejectsTypesThatDoNotFitRunningKeys(t *testing.T) {
	f := newCoordFixture(t, "types: {default: {timeout: 60s}}\ningest: {coalesce: 20s}\n", nil)
	require.NoError(t, f.c.Reload())
	first := f.c.Current()

	// Valid as a file (coalesce lowered with the timeout), but the running coalesce is 20s.
	f.write(t, "types: {default: {timeout: 10s}}\ningest: {coalesce: 5s}\n")
	err := f.c.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ingest.coalesce: 20s must be shorter than every timeout (types.default.timeout is 10s)")
	assert.Same(t, first, f.c.Current())
	assert.Equal(t, 0.0, f.successful())
}

func TestCoordinatorSubscriberError(t *testing.T) {
	f := newCoordFixture(t, "types: {default: {}}\n", nil)
	fail := true
	f.c.Subscribe(func(c *Config) error {
		_ = f.c.Current() // a subscriber may read the current configuration without deadlocking
		if fail {
			return errors.New("scanner refused")
		}
		return nil
	})
	err := f.c.Reload()
	require.ErrorContains(t, err, "scanner refused")
	assert.Nil(t, f.c.Current())
	assert.Equal(t, 0.0, f.successful())
	assert.Equal(t, 1, f.logs.FilterMessage("configuration rejected").Len())

	fail = false
	require.NoError(t, f.c.Reload())
	assert.NotNil(t, f.c.Current())
	assert.Equal(t, 1.0, f.successful())
}

func TestCoordinatorMissingFile(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewCoordinator(filepath.Join(t.TempDir(), "nope.yaml"), nil, nil, reg, nil)
	err := c.Reload()
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, 0.0, gauge(t, reg, "heartbeatd_config_last_reload_successful"))
}

func TestCoordinatorSeededWithTheLoadedConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "heartbeatd.yaml")
	require.NoError(t, os.WriteFile(path, []byte("types: {default: {timeout: 30s}}\nredis: {slots: 64}\n"), 0o600))
	initial, err := LoadEnv(path, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zapcore.InfoLevel)

	before := time.Now().Unix()
	c := NewCoordinator(path, nil, zap.New(core), reg, initial)
	assert.Same(t, initial, c.Current(), "the loaded configuration runs without a second read")
	assert.Equal(t, 1.0, gauge(t, reg, "heartbeatd_config_last_reload_successful"))
	ts := gauge(t, reg, "heartbeatd_config_last_reload_success_timestamp_seconds")
	assert.True(t, float64(before) <= ts && ts < float64(time.Now().Unix()+1), "timestamp %v not within the start", ts)
	assert.Equal(t, 1, logs.FilterMessage("configuration loaded").Len())

	// A later reload treats the seed as the running configuration.
	require.NoError(t, os.WriteFile(path, []byte("types: {default: {timeout: 45s}}\nredis: {slots: 128}\n"), 0o600))
	var seen []*Config
	c.Subscribe(func(c *Config) error { seen = append(seen, c); return nil })
	require.NoError(t, c.Reload())
	require.Len(t, seen, 1)
	assert.Equal(t, 45*time.Second, timeout(t, c.Current(), "default"))
	assert.Equal(t, 64, c.Current().Redis.Slots, "other keys wait for a restart")

	require.NoError(t, os.WriteFile(path, []byte("types: [\n"), 0o600))
	require.Error(t, c.Reload())
	assert.Same(t, seen[0], c.Current())
	assert.Equal(t, 1, logs.FilterMessage("configuration reload rejected; keeping the running configuration").Len())
}
