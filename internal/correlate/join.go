package correlate

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// joinScript records devices interrupted at now in one group and judges the group's threshold in the
// same step, so that concurrent scanners of any replica count every member once and open the outage
// once: the member that makes min_devices opens it, and every member after it finds it.
//
// KEYS[1] the group's interruptions (ZSET)  KEYS[2] the group's outage (HASH)
// ARGV[1] now (ms)  ARGV[2] the window's start (ms)  ARGV[3] min_devices  ARGV[4] the outage id if it opens
// ARGV[5] its start (RFC 3339)  ARGV[6] the group's by  ARGV[7] its value
// ARGV[8] the announcement's lease end (ms)  ARGV[9…] the devices
// Reply: {} while the group has no outage; {id, announced "0"/"1", view} when it has one, where "0" hands
// this caller the announcement: the opener, or the first caller after an announcer's lease ran out (it
// died or failed). Every other caller while the announcement is in flight reads "1", so one outage is
// announced once, not once per batch of its members.
var joinScript = redis.NewScript(`
local id = redis.call('HGET', KEYS[2], 'id')
if not id then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
end
local z = {}
for i = 9, #ARGV do
  z[#z+1] = ARGV[1]
  z[#z+1] = ARGV[i]
  if #z >= 1000 then
    redis.call('ZADD', KEYS[1], unpack(z))
    z = {}
  end
end
if #z > 0 then redis.call('ZADD', KEYS[1], unpack(z)) end
if id then
  local v = redis.call('HMGET', KEYS[2], 'announced', 'view', 'announcing')
  if v[1] ~= '1' and tonumber(v[3] or '0') <= tonumber(ARGV[1]) then
    redis.call('HSET', KEYS[2], 'announcing', ARGV[8])
    return {id, '0', v[2] or ''}
  end
  return {id, '1', v[2] or ''}
end
local n = redis.call('ZCARD', KEYS[1])
if n < tonumber(ARGV[3]) then return {} end
local sample = redis.call('ZRANGE', KEYS[1], 0, ` + strconv.Itoa(sampleSize-1) + `)
local view = cjson.encode({id = ARGV[4], group = {by = ARGV[6], value = ARGV[7]}, state = 'open', started_at = ARGV[5],
  count = n, members = n, silent = n, sample = sample})
redis.call('HSET', KEYS[2], 'id', ARGV[4], 'view', view, 'announced', '0', 'announcing', ARGV[8])
return {ARGV[4], '0', view}
`)

// Join records that devices are being reported interrupted at now, each in its groups (groups[i] for
// devices[i]), and judges each group's threshold as it does (docs/concepts.md, "Correlated outages"):
// a group whose interruptions within the window reach min_devices with these opens its outage here,
// not on a later tick, so at most min_devices − 1 of its members go out without the outage's id. It
// returns, per device, the id of the open outage of its first group that has one ("" for none), and
// the outages not announced yet that the caller must announce (Announce) before any of their members'
// events: those opened here, and those a replica opened and died before announcing.
func (c *Correlator) Join(ctx context.Context, devices []string, groups [][]string, now time.Time) (ids []string, unannounced []Outage, err error) {
	ids = make([]string, len(devices))
	if c == nil || len(devices) == 0 {
		return ids, nil, nil
	}
	byGroup := map[string][]string{}
	var order []string
	for i, d := range devices {
		for _, g := range groups[i] {
			if byGroup[g] == nil {
				order = append(order, g)
			}
			byGroup[g] = append(byGroup[g], d)
		}
	}
	if len(order) == 0 {
		return ids, nil, nil
	}
	now = now.UTC().Truncate(time.Millisecond)
	started, _ := now.MarshalJSON() // a time always marshals
	ms := now.UnixMilli()
	since := now.Add(-c.opts.Correlation.Window).UnixMilli()
	// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT, and the script is short.
	pipe := c.opts.Client.Pipeline()
	cmds := make([]*redis.Cmd, len(order))
	marks := make([]redis.Z, len(order))
	for k, g := range order {
		group := splitGroup(g)
		args := make([]any, 0, 8+len(byGroup[g]))
		args = append(args, ms, since, c.opts.Correlation.MinDevices, outageID(g, now), string(started[1:len(started)-1]),
			group.By, group.Value, now.Add(announceLease).UnixMilli())
		for _, d := range byGroup[g] {
			args = append(args, d)
		}
		cmds[k] = joinScript.Eval(ctx, pipe, []string{c.keys.correlated(g), c.keys.outage(g)}, args...)
		marks[k] = redis.Z{Score: float64(ms), Member: g}
	}
	pipe.ZAdd(ctx, c.keys.groups(), marks...) // the groups the tick looks at, to end their outages
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, fmt.Errorf("correlate: join: %w", err)
	}
	open := map[string]string{}
	for k, g := range order {
		reply, err := cmds[k].StringSlice()
		if err != nil {
			return nil, nil, fmt.Errorf("correlate: join %s: %w", g, err)
		}
		if len(reply) != 3 {
			continue
		}
		open[g] = reply[0]
		if reply[1] == "1" {
			continue
		}
		var o Outage
		if err := json.Unmarshal([]byte(reply[2]), &o); err != nil || o.ID != reply[0] {
			return nil, nil, fmt.Errorf("correlate: outage %s: unreadable view %q", g, reply[2])
		}
		if o.Sample == nil {
			o.Sample = []string{}
		}
		unannounced = append(unannounced, o)
		if o.StartedAt.Equal(now) {
			c.log.Warn("correlated outage started", zap.String("outage_id", o.ID), zap.Int("devices", o.Count))
		}
	}
	for i := range devices {
		for _, g := range groups[i] {
			if id := open[g]; id != "" {
				ids[i] = id
				break
			}
		}
	}
	return ids, unannounced, nil
}

// announceLease is how long the caller Join handed an announcement to has it alone: past it (the caller
// died, or Kafka refused), the next Join or the correlator's tick announces it again.
const announceLease = 5 * time.Second

// Announce publishes outage_started for each outage and marks it announced.
// The caller publishes the members' events after it returns nil, so outage_started reaches Kafka
// first. Announcing again after a failure is harmless: the event is the same, with the same id. On a
// failure the announcements are handed back at once, so the next batch of members announces them.
func (c *Correlator) Announce(ctx context.Context, outages []Outage) error {
	if c == nil || len(outages) == 0 {
		return nil
	}
	events := make([]event.Event, len(outages))
	for i, o := range outages {
		events[i] = outageEvent(event.OutageStarted, o, o.StartedAt)
	}
	for i, err := range c.opts.Sink.Publish(ctx, events) {
		if err != nil {
			c.handBack(ctx, outages)
			return fmt.Errorf("correlate: publish outage_started %s: %w", outages[i].ID, err)
		}
		c.opts.Events.WithLabelValues(string(event.OutageStarted)).Inc()
	}
	pipe := c.opts.Client.Pipeline()
	for _, o := range outages {
		announcedScript.Eval(ctx, pipe, []string{c.keys.outage(groupKey(o.Group.By, o.Group.Value))}, o.ID)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("correlate: announce: %w", err)
	}
	return nil
}

// handBack gives up the announcements of outages after a failed publish, so the next caller of Join takes
// them instead of waiting out announceLease; a failure to hand back only costs that wait.
func (c *Correlator) handBack(ctx context.Context, outages []Outage) {
	pipe := c.opts.Client.Pipeline()
	for _, o := range outages {
		handBackScript.Eval(ctx, pipe, []string{c.keys.outage(groupKey(o.Group.By, o.Group.Value))}, o.ID)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		c.log.Warn("handing back outage announcements failed; they are announced once their lease ends", zap.Error(err))
	}
}

// handBackScript ends the announcement lease of a group's outage, unless it is another outage by now.
//
// KEYS[1] the group's outage (HASH)  ARGV[1] the outage id
var handBackScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then redis.call('HDEL', KEYS[1], 'announcing') end
return 0`)

// announcedScript marks a group's outage announced, unless it ended (and its hash went) meanwhile. The
// API's list of open outages is the tick's to write (checkEnd), so an outage that ended meanwhile is
// never listed again.
//
// KEYS[1] the group's outage (HASH)  ARGV[1] the outage id
var announcedScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then redis.call('HSET', KEYS[1], 'announced', '1') end
return 0`)

// outageID names the outage of group g that starts at now.
func outageID(g string, now time.Time) string {
	return "outage:" + g + "/" + strconv.FormatInt(now.UnixMilli(), 10)
}
