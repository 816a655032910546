package config_test

import (
	"fmt"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

func ExampleConfig_PolicyTable() {
	cfg, err := config.Parse([]byte(`
types:
  default: {timeout: 60s, repeat_every: 5m, max_repeats: 12}
  gateway: {timeout: 30s, repeat_every: 1m}
  temperature-sensor: {timeout: 10m}
  tracker: {max_repeats: 0}
`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(cfg.PolicyTable())
	// Output:
	// TYPE                TIMEOUT  REPEAT_EVERY  MAX_REPEATS    FLAPPING
	// default             1m       5m            12             off
	// gateway             30s      1m            12 *           off
	// temperature-sensor  10m      5m *          12 *           off
	// tracker             1m *     5m *          0 (unlimited)  off
	//
	// *  inherited from types.default
}

func ExamplePolicies_Lookup() {
	cfg, err := config.Parse([]byte("types: {default: {timeout: 60s}, gateway: {timeout: 30s}}"),
		func(name string) (string, bool) {
			if name == "HEARTBEATD_TYPES_GATEWAY_MAX_REPEATS" {
				return "3", true
			}
			return "", false
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	policies := cfg.Policies()
	for _, name := range []string{"gateway", "unknown-kind"} {
		p, known := policies.Lookup(name)
		fmt.Printf("%s: timeout %s, repeat every %s, max %d repeats (configured: %t)\n",
			name, config.FormatDuration(p.Timeout), config.FormatDuration(p.RepeatEvery), p.MaxRepeats, known)
	}
	// Output:
	// gateway: timeout 30s, repeat every 5m, max 3 repeats (configured: true)
	// unknown-kind: timeout 1m, repeat every 5m, max 12 repeats (configured: false)
}

func ExampleParse_errors() {
	_, err := config.Parse([]byte(`
redis: {slots: 48}
types: {gateway: {timeout: 0s}}
log: {format: text}
`), nil)
	fmt.Println(err)
	// Output:
	// config: redis.slots: 48 is not a power of two
	// config: types.default: required
	// config: types.gateway.timeout: must be > 0
	// config: log.format: must be json or console
}
