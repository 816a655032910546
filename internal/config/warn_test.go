package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWarnAfterMustComeBeforeTheTimeout(t *testing.T) {
	for _, tt := range []struct {
		name, types, want string
	}{
		{"equal", "{default: {}, gateway: {timeout: 30s, warn_after: 30s}}",
			"config: types.gateway.warn_after: 30s must be shorter than the type's timeout (30s)"},
		{"inherited", "{default: {timeout: 1m, warn_after: 40s}, gateway: {timeout: 30s}}",
			"config: types.gateway.warn_after: 40s (inherited from types.default) must be shorter than the type's timeout (30s)"},
		{"negative", "{default: {warn_after: -1s}}",
			"config: types.default.warn_after: must not be negative (0 = no early warning)"},
		{"schedule", "{default: {}, meter: {schedule: '0 * * * *', grace: 5m, warn_after: 1m}}",
			"config: types.meter.warn_after: 1m cannot be combined with schedule (set warn_after: 0 on this type)"},
		{"coalesce", "{default: {timeout: 1m, warn_after: 2s}}\ningest: {coalesce: 5s}",
			"config: ingest.coalesce: 5s must be shorter than every warn_after (types.default.warn_after is 2s)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("types: "+tt.types+"\n"), noEnv)
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestWarnAfterPolicies(t *testing.T) {
	cfg, err := Parse([]byte("types: {default: {timeout: 1m, warn_after: 40s}, gateway: {timeout: 2m}, meter: {warn_after: 0s}}\n"), noEnv)
	require.NoError(t, err)
	p := cfg.Policies()
	assert.Equal(t, 40*time.Second, p.WarnAfter("gateway"), "inherited from default")
	assert.Zero(t, p.WarnAfter("meter"), "0 turns it off")
	gw, _ := p.Lookup("gateway")
	assert.Equal(t, 40*time.Second, gw.WithOwnTimeout(5*time.Minute).WarnAfter)
	assert.Zero(t, gw.WithOwnTimeout(30*time.Second).WarnAfter, "a device's own timeout shorter than warn_after: no warning")

	cfg, err = Parse([]byte(minimal), noEnv)
	require.NoError(t, err)
	assert.Zero(t, cfg.Policies().WarnAfter("default"))
}
