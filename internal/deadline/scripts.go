package deadline

import (
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// The Lua scripts spell none of the constants they share with Go. A script's source names each one as
// ${Name}, Name being the Go identifier that defines it, and newScript replaces it with that value, as a
// Lua literal (a number or a quoted string), once at package init.
var scriptConstants = strings.NewReplacer(
	// Scores: deadline_ms × MaxTypes + type index; a dormant alarm entry is scored from dormantAfter up.
	"${MaxTypes}", strconv.Itoa(MaxTypes),
	"${heldScanFactor}", strconv.Itoa(heldScanFactor),
	"${nextScanBound}", strconv.Itoa(nextScanBound),
	"${inFlightRecheck}", strconv.FormatInt(inFlightRecheck.Milliseconds(), 10),
	"${DormantAfter}", strconv.Itoa(dormantAfter),
	"${DefaultType}", luaString(DefaultType),
	// State hashes and encoded states (state.go).
	"${stateGuardField}", luaString(stateGuardField),
	"${stateGuardValue}", luaString(stateGuardValue),
	"${stateSep}", luaString(stateSep),
	"${stateSepByte}", strconv.Itoa(int(stateSep[0])),
	"${stateDeadlinePattern}", luaString(stateDeadlinePattern),
	"${stateTypePattern}", luaString(stateTypePattern),
	"${stateAckedPattern}", luaString(stateAckedPattern),
	"${stateUnackedPattern}", luaString(stateUnackedPattern),
	"${stateSetAcked}", luaString(stateSetAcked),
	"${stateFailuresPattern}", luaString(stateFailuresPattern),
	"${stateNoFailures}", luaString(stateNoFailures),
	"${stateCommittedFormat}", luaString(stateCommittedFormat),
	"${stateReplacingFormat}", luaString(stateReplacingFormat),
	"${stateNextPattern}", luaString(stateNextPattern),
	"${stateHoldPattern}", luaString(stateHoldPattern),
	"${stateOwedPattern}", luaString(stateOwedPattern),
	"${stateOwedWarnedPattern}", luaString(stateOwedWarnedPattern),
	"${holdFieldLate}", luaString(holdFieldLate),
	"${stateLatePattern}", luaString(stateLatePattern),
	"${stateWaitingPattern}", luaString(stateWaitingPattern),
	"${stateSuppressedTail}", luaString(stateSuppressedTail),
	"${stateSuppressedPattern}", luaString(stateSuppressedPattern),
	// In-flight records and the lists packed into one argument or reply element.
	"${recordMarkByte}", strconv.Itoa(int(recordMark[0])),
	"${packSep}", luaString(packSep),
	"${packedItem}", luaString("[^"+packSep+"]+"),
	"${packedPair}", luaString("([^"+packSep+"]+)"+packSep+"([^"+packSep+"]+)"),
	"${listItem}", luaString("[^"+listSep+"]+"),
	// MarkEarlier's results (cause.go).
	"${MarkMoved}", strconv.Itoa(int(MarkMoved)),
	"${MarkLate}", strconv.Itoa(int(MarkLate)),
	"${MarkNotEarlier}", strconv.Itoa(int(MarkNotEarlier)),
	"${MarkOpen}", strconv.Itoa(int(MarkOpen)),
	"${MarkUnknown}", strconv.Itoa(int(MarkUnknown)),
	"${causeSep}", luaString(causeSep),
	// Lua helpers (defined, not a value).
	"${luaPieces}", strings.ReplaceAll(luaPieces, "${maxUnpack}", strconv.Itoa(maxUnpack)),
	"${luaProbe}", luaProbe,
	"${luaLeased}", strings.ReplaceAll(luaLeased, "${leaseMark}", luaString(leaseMark)),
	"${luaRetime}", strings.NewReplacer("${MaxTypes}", strconv.Itoa(MaxTypes), "${listItem}", luaString("[^"+listSep+"]+")).Replace(luaRetime),
)

// maxUnpack is the most values a script hands one command at once. Redis 7.0's Lua refuses to unpack
// 8000 values or more (LUAI_MAXCSTACK: "too many results to unpack"), and a list that follows a configured
// batch (detection.batch, ingest.batch) may be longer, so such lists go to Redis in pieces.
const maxUnpack = 4000

// luaPieces defines the Lua functions that split such a list:
//
//	pieces(list, per, fn)  calls fn(…) with consecutive pieces of list, whole groups of per values
//	                       (pairs for ZADD and HSET), one call when the list is short
//	gather(list, fn)       the replies of fn(…) over the pieces, concatenated (HMGET, ZMSCORE); one
//	                       call's reply itself when the list is short
const luaPieces = `
local function pieces(list, per, fn)
  local n = #list
  local step = ${maxUnpack} - ${maxUnpack} % per
  for i = 1, n, step do fn(unpack(list, i, math.min(i + step - 1, n))) end
end
local function gather(list, fn)
  if #list <= ${maxUnpack} then return fn(unpack(list)) end
  local out, k = {}, 0
  pieces(list, 1, function(...)
    local r = fn(...)
    for j = 1, select('#', ...) do
      k = k + 1
      out[k] = r[j]
    end
  end)
  return out
end
`

// A leased alarm entry is scored half a ms before its lease's end (the ms before it, then leaseMark),
// which comes due at the same whole ms as the end itself and lets a recovery probe
// tell an act held by a claim (a process about to publish it) from an act that is merely ahead.
// Making a held act due would hand it to a second replica, whose `recovered` could then precede the
// holder's `alarm`; left alone, the signal is seen by the holder's acknowledgement, which compares with
// the deadlines set, or by the next claim once the lease runs out.
const leaseMark = ".5"

// luaLeased defines leasedUntil(t), the alarm score of a lease that ends at t (ms): the ms before t,
// marked with leaseMark.
const luaLeased = `local function leasedUntil(t) return string.format('%.0f', t - 1) .. ${leaseMark} end
`

// actMillis is when an alarm entry scored score comes due, in whole ms (a lease's is past its mark).
func actMillis(score float64) int64 { return int64(math.Ceil(score)) }

// luaProbe defines probeDue(key, now, members), the recovery probe (needs luaPieces): each member's alarm
// entry in key is made due at now when it is later and not leased (what ZADD XX LT would do, less the
// leased entries). It returns how many entries it moved.
const luaProbe = `local function probeDue(key, now, members)
  if #members == 0 then return 0 end
  local scores = gather(members, function(...) return redis.call('ZMSCORE', key, ...) end)
  local z = {}
  for k, m in ipairs(members) do
    local s = tonumber(scores[k])
    if s and s > now and s % 1 == 0 then
      z[#z+1] = now
      z[#z+1] = m
    end
  end
  pieces(z, 2, function(...) redis.call('ZADD', key, ...) end)
  return #z / 2
end
`

// packSep separates the items of a list packed into one script argument or reply element (device ids
// hold no control characters, docs/signals.md); listSep the values of a per-type table (typeTable.render).
const (
	packSep = "\n"
	listSep = ","
)

// newScript is redisutil.NewScript with the shared constants above.
func newScript(src string) *redis.Script { return redisutil.NewScript(scriptConstants, src) }

// luaString is redisutil.LuaString, by the name the constants above are written with.
func luaString(s string) string { return redisutil.LuaString(s) }
