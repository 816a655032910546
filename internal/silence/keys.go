package silence

import (
	"cmp"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// The silences' keys. Their strings are the ones internal/deadline's Keyspace built before silences had a
// package of their own, so silences stored by an older replica stay readable.

// silencesKey is the HASH silence id → JSON silence, under the key prefix (config redis.key_prefix;
// "" = its default, as for internal/deadline's keys).
func silencesKey(prefix string) string {
	return cmp.Or(prefix, config.DefaultKeyPrefix) + ":silences"
}

// endedKey guards the announcement of a silence's end (ends.go); it is built from the silences key, so
// it shares its prefix.
func endedKey(silencesKey, id string) string { return silencesKey + ":ended:" + id }
