package idhash

import (
	"hash/fnv"
	"testing"
)

// Of is FNV-1a as the standard library computes it, without its allocation.
func TestOfIsFNV1a(t *testing.T) {
	for _, s := range []string{"", "d", "device-000123", "ünïcode-id"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := Of(s), h.Sum64(); got != want {
			t.Errorf("Of(%q) = %x, want %x", s, got, want)
		}
	}
}
