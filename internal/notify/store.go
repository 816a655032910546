package notify

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of the state one receiver keeps in Redis (docs/concepts.md).
const (
	// maxQueue: a device's queue is at most this long; a notification beyond it is dead-lettered (reason
	// "queue full"), counted, never dropped silently.
	maxQueue = 1000
	// maxDead is how many dead letters a receiver keeps, newest first; deadTTL how long the list outlives
	// its last entry.
	maxDead = 1000
	deadTTL = 30 * 24 * time.Hour
	// sampleSize is how many devices a summary names.
	sampleSize = 20
	// openTTL: the incidents a receiver was told of are forgotten this long after the last one opened,
	// so a receiver removed from the configuration leaves nothing for good. A receiver in use opens
	// incidents far more often.
	openTTL = 90 * 24 * time.Hour
)

// store keeps what the notifier must not lose between a Kafka commit and a delivery: queued retries,
// the incidents each receiver was told of, folded storms and dead letters.
type store struct {
	rdb  redis.UniversalClient
	keys keyspace
	// ttl is how long a queue or fold outlives its last write: give_up_after and a margin, so a receiver
	// removed from the configuration leaves nothing behind for good.
	ttl time.Duration
}

// pending is one queued notification.
type pending struct {
	Data     *Data `json:"data"`
	Attempts int   `json:"attempts"`
	// First is when delivery was first tried (ms): give_up_after counts from it.
	First int64 `json:"first"`
}

// enqueueScript appends a notification to a device's queue and schedules the queue.
// KEYS: queue, due. ARGV: entry, device, due ms, ttl ms, max length. Reply: 1, or 0 when the queue is full.
var enqueueScript = redis.NewScript(`
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[5]) then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1`)

// errQueueFull is Enqueue's answer for a device whose queue holds maxQueue notifications.
var errQueueFull = errors.New("queue full")

// Enqueue keeps p for a retry at due, behind the device's queued notifications.
func (s *store) Enqueue(ctx context.Context, receiver string, p pending, due time.Time) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	ok, err := enqueueScript.Run(ctx, s.rdb, []string{s.keys.queue(receiver, p.Data.DeviceID), s.keys.due(receiver)},
		b, p.Data.DeviceID, due.UnixMilli(), s.ttl.Milliseconds(), maxQueue).Int()
	if err == nil && ok == 0 {
		err = errQueueFull
	}
	return err
}

// claimScript leases a due queue's head, unless another process took it first.
// KEYS: due, queue. ARGV: now ms, lease end ms, device. Reply: the head, or nil.
var claimScript = redis.NewScript(`
local at = redis.call('ZSCORE', KEYS[1], ARGV[3])
if not at or tonumber(at) > tonumber(ARGV[1]) then return false end
local head = redis.call('LINDEX', KEYS[2], 0)
if not head then
  redis.call('ZREM', KEYS[1], ARGV[3])
  return false
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
return head`)

// claimed is a queue's head handed out for one attempt.
type claimed struct {
	device string
	raw    string
	p      pending
}

// Claim hands out up to n heads of due queues, leased until now+lease so another process skips them.
func (s *store) Claim(ctx context.Context, receiver string, now time.Time, lease time.Duration, n int) ([]claimed, error) {
	devs, err := s.rdb.ZRangeByScore(ctx, s.keys.due(receiver), &redis.ZRangeBy{Min: "-inf",
		Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(n)}).Result()
	if err != nil {
		return nil, err
	}
	out := make([]claimed, 0, len(devs))
	for _, dev := range devs {
		raw, err := claimScript.Run(ctx, s.rdb, []string{s.keys.due(receiver), s.keys.queue(receiver, dev)}, now.UnixMilli(),
			now.Add(lease).UnixMilli(), dev).Text()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return out, err
		}
		c := claimed{device: dev, raw: raw}
		if err := json.Unmarshal([]byte(raw), &c.p); err != nil || c.p.Data == nil {
			// Unreadable: written by an incompatible version. Removed, so it cannot block its device.
			_ = s.Settle(ctx, receiver, dev, raw, now)
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// settleScript removes a delivered (or dead-lettered) head and schedules what follows it.
// KEYS: queue, due. ARGV: head, device, now ms.
var settleScript = redis.NewScript(`
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] then redis.call('LPOP', KEYS[1]) end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[2]) else redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2]) end
return 1`)

// Settle removes the head raw of a device's queue, once delivered or dead-lettered; what follows it is
// due at now.
func (s *store) Settle(ctx context.Context, receiver, device, raw string, now time.Time) error {
	return settleScript.Run(ctx, s.rdb, []string{s.keys.queue(receiver, device), s.keys.due(receiver)}, raw, device,
		now.UnixMilli()).Err()
}

// retryScript records a failed attempt on the head and schedules the next.
// KEYS: queue, due. ARGV: head, updated head, device, next ms.
var retryScript = redis.NewScript(`
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] then redis.call('LSET', KEYS[1], 0, ARGV[2]) end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
return 1`)

// Retry stores the head's attempt count and schedules it at next.
func (s *store) Retry(ctx context.Context, receiver string, c claimed, next time.Time) error {
	b, err := json.Marshal(c.p)
	if err != nil {
		return err
	}
	return retryScript.Run(ctx, s.rdb, []string{s.keys.queue(receiver, c.device), s.keys.due(receiver)}, c.raw, b, c.device,
		next.UnixMilli()).Err()
}

// Waiting is how many devices have notifications queued at a receiver.
func (s *store) Waiting(ctx context.Context, receiver string) (int64, error) {
	return s.rdb.ZCard(ctx, s.keys.due(receiver)).Result()
}

// DeadLetter is a notification a receiver refused for good, with its answer.
type DeadLetter struct {
	Receiver string `json:"receiver"`
	EventID  string `json:"event_id,omitempty"`
	DeviceID string `json:"device_id,omitempty"`
	Kind     string `json:"kind"`
	Reason   string `json:"reason"`
	Status   int    `json:"status,omitempty"`
	Answer   string `json:"answer,omitempty"`
	Attempts int    `json:"attempts"`
	// Folded is, for a summary, how many notifications it stood for.
	Folded int       `json:"folded,omitempty"`
	At     time.Time `json:"at"`
}

// Dead keeps a dead letter in the receiver's capped list.
func (s *store) Dead(ctx context.Context, d DeadLetter) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	key := s.keys.dead(d.Receiver)
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, b)
		p.LTrim(ctx, key, 0, maxDead-1)
		p.PExpire(ctx, key, deadTTL)
		return nil
	})
	return err
}

// DeadLetters lists a receiver's newest n dead letters.
func (s *store) DeadLetters(ctx context.Context, receiver string, n int) ([]DeadLetter, error) {
	raw, err := s.rdb.LRange(ctx, s.keys.dead(receiver), 0, int64(n)-1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(raw))
	for _, r := range raw {
		var d DeadLetter
		if json.Unmarshal([]byte(r), &d) == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

// openScript records an opening kind of an incident at a receiver: appended to the incident it has
// for the device (same 1), or replacing it (same 0: a new incident).
// KEYS: open. ARGV: device, incident id, since ms, kind, ttl ms, same.
var openScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], v .. ',' .. ARGV[4])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1`)

// Opened records that a receiver was told of an incident's opening kind: one more kind of the incident
// it has for the device (same), or a new incident of that id, since, replacing it.
func (s *store) Opened(ctx context.Context, receiver, device, incident string, since time.Time, kind string, same bool) error {
	flag := 0
	if same {
		flag = 1
	}
	return openScript.Run(ctx, s.rdb, []string{s.keys.open(receiver)}, device, incident, since.UnixMilli(), kind,
		openTTL.Milliseconds(), flag).Err()
}

// State is, in one round trip, what a receiver was told of a device's open incident
// ("<id>|<since ms>|<kinds>", "" when nothing) and whether the device has notifications waiting there.
func (s *store) State(ctx context.Context, receiver, device string) (mark string, queued bool, err error) {
	var hget *redis.StringCmd
	var exists *redis.IntCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hget = p.HGet(ctx, s.keys.open(receiver), device)
		exists = p.Exists(ctx, s.keys.queue(receiver, device))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", false, err
	}
	return hget.Val(), exists.Val() > 0, nil
}

// markIncident is the incident id of an open HASH value (parseMark).
func markIncident(v string) string {
	if id, _, _, ok := parseMark(v); ok {
		return id
	}
	return v
}

// closeScript forgets the incident a receiver was told of. KEYS: open. ARGV: device. Reply: its id or nil.
var closeScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
return v`)

// Closed forgets a device's incident at a receiver and returns its id; "" when the receiver was never
// told of one (its close is not news to it).
func (s *store) Closed(ctx context.Context, receiver, device string) (string, error) {
	v, err := closeScript.Run(ctx, s.rdb, []string{s.keys.open(receiver)}, device).Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return markIncident(v), nil
}

// foldScript counts one notification into the next summary.
// KEYS: fold, sample. ARGV: kind, device, now ms, ttl ms, sample size.
var foldScript = redis.NewScript(`
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('HINCRBY', KEYS[1], '_total', 1)
redis.call('HSETNX', KEYS[1], '_since', ARGV[3])
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1`)

// Fold counts a notification the rate limit held into the receiver's next summary.
func (s *store) Fold(ctx context.Context, receiver, kind, device string, now time.Time) error {
	return foldScript.Run(ctx, s.rdb, []string{s.keys.fold(receiver), s.keys.sample(receiver)}, kind, device, now.UnixMilli(),
		s.ttl.Milliseconds(), sampleSize).Err()
}

// Folded reads the next summary of a receiver when one is due and no other process is sending it
// (a lease of hold); nil when there is none.
func (s *store) Folded(ctx context.Context, receiver string, hold time.Duration) (*Summary, error) {
	total, err := s.rdb.HGet(ctx, s.keys.fold(receiver), "_total").Int()
	if errors.Is(err, redis.Nil) || (err == nil && total <= 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ok, err := s.rdb.SetNX(ctx, s.keys.foldLease(receiver), 1, hold).Result(); err != nil || !ok {
		return nil, err
	}
	h, err := s.rdb.HGetAll(ctx, s.keys.fold(receiver)).Result()
	if err != nil {
		return nil, err
	}
	sample, err := s.rdb.LRange(ctx, s.keys.sample(receiver), 0, sampleSize-1).Result()
	if err != nil {
		return nil, err
	}
	sum := &Summary{Kinds: map[string]int{}, Devices: sample}
	for k, v := range h {
		n, _ := strconv.Atoi(v)
		switch k {
		case "_total":
			sum.Count = n
		case "_since":
			sum.Since = time.UnixMilli(int64(n)).UTC()
		default:
			sum.Kinds[k] = n
		}
	}
	return sum, nil
}

// settleFoldScript takes what a summary said out of the fold; what was folded meanwhile stays.
// KEYS: fold, sample, lease. ARGV: sample count, then kind, count pairs (with _total).
var settleFoldScript = redis.NewScript(`
for i = 2, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], -tonumber(ARGV[i+1])) <= 0 then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
if not redis.call('HGET', KEYS[1], '_total') then
  redis.call('DEL', KEYS[1], KEYS[2])
else
  redis.call('HDEL', KEYS[1], '_since')
  redis.call('LTRIM', KEYS[2], 0, -tonumber(ARGV[1]) - 1)
end
redis.call('DEL', KEYS[3])
return 1`)

// SettleFold removes a sent (or dead-lettered) summary's counts.
func (s *store) SettleFold(ctx context.Context, receiver string, sum *Summary) error {
	args := []any{len(sum.Devices), "_total", sum.Count}
	for k, n := range sum.Kinds {
		args = append(args, k, n)
	}
	return settleFoldScript.Run(ctx, s.rdb, []string{s.keys.fold(receiver), s.keys.sample(receiver), s.keys.foldLease(receiver)},
		args...).Err()
}
