package deadline

import (
	"context"
	"strconv"
	"strings"
)

// luaRetime defines the Lua side of a score whose type index changes (internal/typeindex, names.go):
//
//	numbers(list)                        the numbers of a comma-separated list, by type index from 1
//	supersedes(cur, score, seen, now, leads)
//	                                     whether a signal at seen (ms) scoring score replaces the stored
//	                                     score cur (nil: none). The same index: its deadline is later
//	                                     (as ZADD GT). Another: the signal is not older than the stored
//	                                     one, its deadline less its index's lead (leads), or that lead
//	                                     gives a last signal after now, which only a lead since shortened
//	                                     does (an index registered without its lead).
const luaRetime = `
local function numbers(list)
  local out = {}
  for v in string.gmatch(list, ${listItem}) do out[#out+1] = tonumber(v) end
  return out
end
local function supersedes(cur, score, seen, now, leads)
  if not cur then return true end
  local t = cur % ${MaxTypes}
  if t == score % ${MaxTypes} then return score > cur end
  local prior = (cur - t) / ${MaxTypes} - (leads[t+1] or leads[1])
  return seen >= prior or prior > now
end
`

// retimeScript writes the deadlines of signals whose type index differs from the one their device was
// known with (a changed timeout, a new own timeout, another type), each only if it supersedes the stored
// score (luaRetime), and probes for recovery the devices it wrote.
//
// KEYS: pairs deadlines, alarms — one per slot in the call (one slot on Redis Cluster)
// ARGV[1] now (ms)  ARGV[2] the lead (ms) each type index was written with, comma-separated
// then quads: key pair number (1-based), device, score, signal time (ms).
// Reply: how many alarm entries it made due (recovery candidates).
var retimeScript = newScript(`
${luaPieces}
${luaProbe}
${luaRetime}
local now = tonumber(ARGV[1])
local leads = numbers(ARGV[2])
local probed = 0
for i = 3, #ARGV, 4 do
  local base = (tonumber(ARGV[i]) - 1) * 2
  local m, score, seen = ARGV[i+1], tonumber(ARGV[i+2]), tonumber(ARGV[i+3])
  local cur = redis.call('ZSCORE', KEYS[base+1], m)
  if supersedes(cur and tonumber(cur), score, seen, now, leads) then
    redis.call('ZADD', KEYS[base+1], ARGV[i+2], m)
    probed = probed + probeDue(KEYS[base+2], now, {m})
  end
end
return probed
`)

// retimedSignal is a signal whose type index differs from its device's known one: its slot, device,
// score and signal time.
type retimedSignal struct {
	slot   int
	device string
	score  int64
	seen   int64
}

// retimeCalls groups retimed signals into retimeScript calls: one per slot on Redis Cluster, one for
// the batch on a standalone server.
func (s *Store) retimeCalls(ctx context.Context, retimed []retimedSignal, now int64) []scriptCall {
	if len(retimed) == 0 {
		return nil
	}
	leads := s.identityLeads(ctx).render(millis)
	calls := s.newSlotCalls(func(slot int) []string { return []string{s.keys.Deadlines(slot), s.keys.alarms(slot)} }, now, leads)
	for _, r := range retimed {
		calls.add(r.slot, r.device, r.score, r.seen)
	}
	return calls.calls
}

// untypedTables are the refresh script's tables besides the timeouts: the index each type index is
// written with now ("" when every one is its own) and the lead each was written with.
func (s *Store) untypedTables(ctx context.Context) (currents, leads string, err error) {
	cur, err := s.currentIndexes(ctx)
	if err != nil {
		return "", "", err
	}
	same := true
	var b strings.Builder
	for i, c := range cur {
		same = same && c == i
		if i > 0 {
			b.WriteString(listSep)
		}
		b.WriteString(strconv.Itoa(c))
	}
	if same {
		return "", "", nil
	}
	return b.String(), s.identityLeads(ctx).render(millis), nil
}
