package deadline

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
)

// Keyspace builds the keys of this package's families: the slots' sets and hashes and the store-wide keys
// beside them (the packages with keys of their own build them in their keys.go). Keys are never
// concatenated at call sites: all keys of one slot share the hash tag {s}, so the slot's scripts run on
// Redis Cluster too.
type Keyspace struct {
	prefix string
}

// NewKeyspace returns the key builder for prefix (config redis.key_prefix; "" = its default).
func NewKeyspace(prefix string) Keyspace {
	return Keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

func (k Keyspace) slotKey(slot int, name string) string {
	return slotlayout.SlotKey(k.prefix, slot, name)
}

// Deadlines is the ZSET device → deadline_ms×MaxTypes + type index of every online device in slot.
func (k Keyspace) Deadlines(slot int) string { return k.slotKey(slot, "deadlines") }

// alarms is the ZSET device → next act time (ms) of slot's incidents; also the lease of a claim and of
// an in-flight record.
func (k Keyspace) alarms(slot int) string { return k.slotKey(slot, "alarms") }

// dormantAfter: an alarm entry scored at or above it is dormant, never due. A dormant entry is scored
// dormantAfter + the time it went dormant (ms), not +inf: Redis orders equal scores by member name, which
// makes every insertion among many +inf entries compare device names. 1e15 ms is beyond the year 30,000
// and keeps every score exact in a float64; +inf entries still read as dormant.
const dormantAfter = 1_000_000_000_000_000

// dormantScore is the alarm score of an incident going dormant at now (ms).
func dormantScore(now int64) string { return strconv.FormatInt(dormantAfter+now, 10) }

// inFlight is the HASH record → packed committed claims of slot's in-flight records (doc.go); each
// record's lease is its member in the slot's alarms set.
func (k Keyspace) inFlight(slot int) string { return k.slotKey(slot, "inflight") }

// state is the HASH device → encoded State of an interrupted device, plus stateGuardField.
func (k Keyspace) state(slot int) string { return k.slotKey(slot, "state") }

// stateGuardField is a field the claim and ack scripts keep in every state hash, with a value longer than
// any hash-max-listpack-value, so Redis keeps the hash a hashtable: a listpack (the default up to 512
// fields) looks every field up by a linear scan. A control character cannot be part of a device id
// (docs/signals.md), so the field never collides with a device.
const stateGuardField = "\x00hashtable"

// stateGuardValue is stateGuardField's value: longer than hash-max-listpack-value (64 by default) even
// where an operator raised it a lot; 64 slots × 512 B is the whole cost.
var stateGuardValue = strings.Repeat("-", 512)

// acting is the STRING, expiring within seconds, that holds back the `recovered` of device's incident while
// an operator's ack of it is being announced (Store.SetAcked).
func (k Keyspace) acting(slot int, device string) string { return k.slotKey(slot, "acting:"+device) }

// dead is the ZSET device → time parked (ms) of claims that failed to publish too often.
func (k Keyspace) dead(slot int) string { return k.slotKey(slot, "dead") }

// Types is the HASH type name → type index folded into deadline scores.
func (k Keyspace) Types() string { return k.prefix + ":types" }

// Slot is the slot of device among slots (a power of two; internal/slotlayout).
func Slot(device string, slots int) int { return slotlayout.Slot(device, slots) }

// seen is the ZSET of the devices of types with expected times (docs/schedules.md), whose last signal
// cannot be told from their deadline: device → its last signal (ms), and incidentSeenMark + device → the
// last signal before its open incident, pinned when the incident is claimed (expected.go).
func (k Keyspace) seen(slot int) string { return k.slotKey(slot, "seen") }

// causes is the HASH device → the cause of its latest incident that did not begin with silence (a
// reported failure, offline; cause.go): moved deadline, last seen, kind and reason. Written only by
// MarkEarlier, so a fleet without such messages has no such key and its claims never read one.
func (k Keyspace) causes(slot int) string { return k.slotKey(slot, "causes") }

// reported is the ZSET device → the deadline (ms) a failure the device reported moved its deadline to,
// until that deadline is claimed or a newer signal ends it (cause.go). The claim reads it to take a
// failure heard after every blind window at once (hold-back need not wait for the device's grace) and to
// put back a failure that a signal older than it moved on. Written only by MarkEarlier, so a fleet
// without reported failures has no such key.
func (k Keyspace) reported(slot int) string { return k.slotKey(slot, "reported") }
