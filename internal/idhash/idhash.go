// Package idhash hashes device ids for the in-memory tables that key devices by a 64-bit hash instead of
// their ids (the parent-link and type memories, the timeout advice's sample).
package idhash

// Of is 64-bit FNV-1a of s, inline: the signal path calls it per signal without allocating.
func Of(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
