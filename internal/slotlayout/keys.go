package slotlayout

import (
	"cmp"
	"hash/crc32"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the layout's keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// layout is the HASH of the slot-count history: slots, previous, changed_at, epoch, losses.
func (k keyspace) layout() string { return k.prefix + ":layout" }

// retiring is the STRING lock one replica holds while it retires a settled doubling (a minute at most).
func (k keyspace) retiring() string { return k.prefix + ":layout:retiring" }

// epoch is the STRING holding the layout's epoch on the Redis master of slot (it shares the slot's hash
// tag): on Redis Cluster the layout lives on one master, and a slot's marker gone says that its master
// lost its data (datalost.go).
func (k keyspace) epoch(slot int) string { return SlotKey(k.prefix, slot, "epoch") }

// SlotKey is the key called name of slot under prefix. Every key of a slot, whichever package owns it, is
// built here: they share the hash tag {slot}, so they live on one Redis Cluster master and a slot's
// script may name them all.
func SlotKey(prefix string, slot int, name string) string {
	return prefix + ":{" + strconv.Itoa(slot) + "}:" + name
}

// LayoutKey is the layout hash's name under prefix, for tests that fail the master holding it.
func LayoutKey(prefix string) string { return newKeyspace(prefix).layout() }

// Slot is the slot of device among slots (a power of two).
func Slot(device string, slots int) int {
	return int(crc32.ChecksumIEEE([]byte(device)) & uint32(slots-1))
}
