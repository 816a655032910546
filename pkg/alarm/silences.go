package alarm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Silence is a maintenance window: devices it matches raise no events while it lasts. Detection goes on,
// so a device still silent when the window ends alarms then.
type Silence struct {
	ID         string    `json:"id"`
	DeviceID   string    `json:"device_id,omitempty"`
	DeviceType string    `json:"device_type,omitempty"`
	Starts     time.Time `json:"starts"`
	Ends       time.Time `json:"ends"`
	Comment    string    `json:"comment,omitempty"`
	// By is who created the silence, when given; its silenced event carries it.
	By string `json:"by,omitempty"`
	// Token names the API token that created it when By names someone else (docs/access.md).
	Token string `json:"token,omitempty"`
}

// ErrInvalidSilence is wrapped by Create for a silence that cannot be stored; the message says why.
var ErrInvalidSilence = errors.New("invalid silence")

// MaxSilences bounds the stored silences (ended ones count until they are purged, a minute after their
// end): every replica re-reads all of them every second and checks them on every claim.
const MaxSilences = 1000

// ErrTooManySilences is wrapped by Create when MaxSilences are stored.
var ErrTooManySilences = errors.New("too many silences")

// createSilenceScript stores a silence unless the hash is full, in one step, so concurrent creates
// through several replicas cannot overshoot the bound.
//
// KEYS[1] silences hash; ARGV[1] bound, ARGV[2] id, ARGV[3] JSON. Reply: 1 stored, 0 full.
var createSilenceScript = redis.NewScript(`
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
return 1`)

// SilencesOptions configures a Silences store.
type SilencesOptions struct {
	// Refresh is how often the in-memory copy is re-read, so a silence created through another replica
	// applies here within this long (default 1s).
	Refresh time.Duration
	// Store names a silenced device's type for the silence's events and lets End re-arm the incidents a
	// silence deferred; nil = neither (the incidents alarm when the silence would have ended).
	Store *deadline.Store
	// Acts publishes silenced and unsilenced (docs/events.md); nil = no events.
	Acts   *Acts
	Now    func() time.Time
	Logger *zap.Logger
}

// Silences keeps silences in one Redis hash shared by every replica, and an in-memory index of them so
// the alarm loop's per-claim check costs two map lookups, not a round trip.
type Silences struct {
	rdb   redis.UniversalClient
	key   string
	opts  SilencesOptions
	log   *zap.Logger
	index atomic.Pointer[silenceIndex]
	// announced holds the ended silences whose unsilenced event went out (here or on another replica);
	// only the tending loop touches it.
	announced map[string]bool
}

// silenceIndex is an immutable snapshot: the latest end per device and per type, of every stored silence.
type silenceIndex struct {
	all      []Silence
	byDevice map[string][]Silence
	byType   map[string][]Silence
	// losses is how many times the store had found Redis without its data when the snapshot was read.
	losses int64
}

// NewSilences returns the store; Load or Run fills its in-memory index.
func NewSilences(rdb redis.UniversalClient, keys deadline.Keyspace, opts SilencesOptions) *Silences {
	if opts.Refresh <= 0 {
		opts.Refresh = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	s := &Silences{rdb: rdb, key: keys.Silences(), opts: opts, log: opts.Logger.With(zap.String("component", "silences")),
		announced: map[string]bool{}}
	s.index.Store(buildIndex(nil))
	return s
}

// Create stores s (exactly one of DeviceID and DeviceType; Ends in the future; Starts defaults to now)
// and returns it with its new id.
func (s *Silences) Create(ctx context.Context, sil Silence) (Silence, error) {
	now := s.opts.Now()
	switch {
	case (sil.DeviceID == "") == (sil.DeviceType == ""):
		return Silence{}, fmt.Errorf("%w: give exactly one of device_id and device_type", ErrInvalidSilence)
	case len(sil.DeviceID) > 256 || len(sil.DeviceType) > 256:
		return Silence{}, fmt.Errorf("%w: device_id and device_type are at most 256 bytes", ErrInvalidSilence)
	case len(sil.Comment) > MaxActNote:
		return Silence{}, fmt.Errorf("%w: comment is at most %d bytes", ErrInvalidSilence, MaxActNote)
	case len(sil.By) > MaxActBy:
		return Silence{}, fmt.Errorf("%w: by is at most %d bytes", ErrInvalidSilence, MaxActBy)
	}
	if sil.Starts.IsZero() {
		sil.Starts = now
	}
	if !sil.Ends.After(now) || !sil.Ends.After(sil.Starts) {
		return Silence{}, fmt.Errorf("%w: it must end in the future and after it starts", ErrInvalidSilence)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	sil.ID = hex.EncodeToString(id[:])
	sil.Starts, sil.Ends = sil.Starts.UTC().Truncate(time.Millisecond), sil.Ends.UTC().Truncate(time.Millisecond)
	b, err := json.Marshal(sil)
	if err != nil {
		return Silence{}, err
	}
	stored, err := createSilenceScript.Run(ctx, s.rdb, []string{s.key}, MaxSilences, sil.ID, b).Int()
	if err != nil {
		return Silence{}, fmt.Errorf("alarm: store silence: %w", err)
	}
	if stored == 0 {
		return Silence{}, fmt.Errorf("%w: %d are stored, the most allowed; delete some first", ErrTooManySilences, MaxSilences)
	}
	s.log.Info("silence created", zap.String("id", sil.ID), zap.String("device_id", sil.DeviceID),
		zap.String("device_type", sil.DeviceType), zap.Time("ends", sil.Ends))
	// The index first: the alarm loop honours the silence before consumers hear of it.
	err = s.Load(ctx)
	if s.opts.Acts != nil {
		s.opts.Acts.Publish(ctx, SilenceEvent(event.Silenced, sil, s.deviceType(ctx, sil), Act{By: sil.By, Note: sil.Comment, Token: sil.Token}, now))
	}
	return sil, err
}

// List returns the silences that have not ended, soonest end first.
func (s *Silences) List(ctx context.Context) ([]Silence, error) {
	all, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	out := make([]Silence, 0, len(all))
	for _, sil := range all {
		if sil.Ends.After(now) {
			out = append(out, sil)
		}
	}
	return out, nil
}

// Delete ends a silence at once, by no one in particular: End with no act.
func (s *Silences) Delete(ctx context.Context, id string) (bool, error) {
	return s.End(ctx, id, Act{})
}

// End ends a silence at once; false when there was none with that id. The incidents it deferred are
// re-armed first (Rearm), so still-silent devices alarm now rather than when it would have ended; then
// it is deleted and its unsilenced event, carrying act, goes out once (endedKey guards it against the
// tending loop announcing the same end).
func (s *Silences) End(ctx context.Context, id string, act Act) (bool, error) {
	raw, err := s.rdb.HGet(ctx, s.key, id).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("alarm: end silence: %w", err)
	}
	var sil Silence
	readable := json.Unmarshal([]byte(raw), &sil) == nil
	now := s.opts.Now()
	if readable && sil.Ends.After(now) {
		// Before the delete: when re-arming fails the silence stays and the caller may try again.
		n, err := s.Rearm(ctx, sil, now)
		if err != nil {
			return false, err
		}
		if n > 0 {
			s.log.Info("re-armed the incidents the silence deferred", zap.String("id", id), zap.Int("incidents", n))
		}
	}
	n, err := s.rdb.HDel(ctx, s.key, id).Result()
	if err != nil {
		return false, fmt.Errorf("alarm: delete silence: %w", err)
	}
	if n == 0 {
		return false, s.Load(ctx) // ended by a concurrent call
	}
	s.log.Info("silence deleted", zap.String("id", id), zap.String("by", act.By))
	err = s.Load(ctx)
	if readable && s.opts.Acts != nil {
		first, gerr := s.rdb.SetNX(ctx, endedKey(s.key, id), announcedDone, announcedTTL).Result()
		switch {
		case gerr != nil:
			s.log.Warn("the silence is deleted, but its unsilenced event is not published: Redis failed the guard",
				zap.String("id", id), zap.Error(gerr))
		case first:
			s.opts.Acts.Publish(ctx, SilenceEvent(event.Unsilenced, sil, s.deviceType(ctx, sil), act, now))
		}
	}
	return true, err
}

// rearmBatch bounds one read of a slot's deferred incidents while a type silence is re-armed (a
// variable so tests can span several batches with a small fleet).
var rearmBatch = 500

// rearmScript moves the next act of each given incident to ARGV[2] where it is still exactly ARGV[1]:
// the silence's end, which is where Decide put every incident the silence deferred. An incident the
// alarm loop holds (leased: scored now + lease) or scheduled for another reason is left alone.
//
// KEYS[1] alarms; ARGV[1] the silence's end (ms), ARGV[2] the new act time (ms), ARGV[3…] devices.
// Reply: how many moved.
var rearmScript = redis.NewScript(`
local moved = 0
local want = tonumber(ARGV[1])
for i = 3, #ARGV do
  local sc = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if sc and tonumber(sc) == want then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
    moved = moved + 1
  end
end
return moved`)

// Rearm brings forward the next act of the incidents sil deferred, to now + two index refreshes: by
// then every replica's index has dropped the ended silence, so the claim is not deferred again. A device
// silence looks at its device; a type silence at every slot's incidents scheduled at its end, in bounded
// batches, keeping those of its type. It returns how many incidents it moved.
func (s *Silences) Rearm(ctx context.Context, sil Silence, now time.Time) (int, error) {
	store := s.opts.Store
	if store == nil {
		return 0, nil
	}
	end := sil.Ends.UnixMilli()
	at := now.Add(2 * s.opts.Refresh).UnixMilli()
	keys := store.Keys()
	moved := 0
	move := func(slot int, devices []string) error {
		args := make([]any, 0, 2+len(devices))
		args = append(args, end, at)
		for _, d := range devices {
			args = append(args, d)
		}
		n, err := rearmScript.Run(ctx, s.rdb, []string{keys.Alarms(slot)}, args...).Int()
		if err != nil {
			return fmt.Errorf("alarm: re-arm slot %d: %w", slot, err)
		}
		moved += n
		return nil
	}
	l := store.Layout()
	if sil.DeviceID != "" {
		slots := []int{deadline.Slot(sil.DeviceID, l.Slots)}
		if l.Previous > 0 && deadline.Slot(sil.DeviceID, l.Previous) != slots[0] {
			slots = append(slots, deadline.Slot(sil.DeviceID, l.Previous))
		}
		for _, slot := range slots {
			if err := move(slot, []string{sil.DeviceID}); err != nil {
				return moved, err
			}
		}
		return moved, nil
	}
	score := strconv.FormatInt(end, 10)
	for slot := range l.Slots {
		for offset := int64(0); ; {
			members, err := s.rdb.ZRangeByScore(ctx, keys.Alarms(slot), &redis.ZRangeBy{Min: score, Max: score,
				Offset: offset, Count: int64(rearmBatch)}).Result()
			if err != nil {
				return moved, fmt.Errorf("alarm: re-arm slot %d: %w", slot, err)
			}
			if len(members) == 0 {
				break
			}
			states, err := s.rdb.HMGet(ctx, keys.State(slot), members...).Result()
			if err != nil {
				return moved, fmt.Errorf("alarm: re-arm slot %d: %w", slot, err)
			}
			var ours []string
			for i, v := range states {
				// Members without a state are in-flight records' leases, not incidents.
				if str, ok := v.(string); ok {
					st, err := deadline.DecodeState(str)
					if err == nil && config.BaseType(store.TypeName(ctx, st.TypeIndex)) == sil.DeviceType {
						ours = append(ours, members[i])
					}
				}
			}
			if len(ours) > 0 {
				if err := move(slot, ours); err != nil {
					return moved, err
				}
			}
			// Moved incidents left the range; the others are still in it, so the next page skips them.
			offset += int64(len(members) - len(ours))
			if len(members) < rearmBatch {
				break
			}
		}
	}
	return moved, nil
}

// deviceType is the type of a device silence's device as Redis knows it ("" when unknown), so the
// silence's events name it; a type silence's events name their type.
func (s *Silences) deviceType(ctx context.Context, sil Silence) string {
	if sil.DeviceID == "" || s.opts.Store == nil {
		return sil.DeviceType
	}
	d, found, err := s.opts.Store.Device(ctx, sil.DeviceID)
	if err != nil || !found {
		return ""
	}
	return config.BaseType(d.Type)
}

// SilencedUntil is when the latest silence covering device (of type typ) at now ends; zero when none does.
// It reads the in-memory index only.
func (s *Silences) SilencedUntil(device, typ string, now time.Time) time.Time {
	idx := s.index.Load()
	var until time.Time
	// A device with its own timeout is recorded as "<type>@<timeout>": its type's silences cover it.
	for _, list := range [][]Silence{idx.byDevice[device], idx.byType[config.BaseType(typ)]} {
		for _, sil := range list {
			if !sil.Starts.After(now) && sil.Ends.After(now) && sil.Ends.After(until) {
				until = sil.Ends
			}
		}
	}
	return until
}

// Lookup returns the stored silence with id from the in-memory index.
func (s *Silences) Lookup(id string) (Silence, bool) {
	for _, sil := range s.index.Load().all {
		if sil.ID == id {
			return sil, true
		}
	}
	return Silence{}, false
}

// Load re-reads every silence into the in-memory index. When Redis holds fewer than the index, it asks
// the store whether Redis lost its data since the index was read (a restart without persistence): then
// the silences the index holds are written back instead of forgotten.
func (s *Silences) Load(ctx context.Context) error {
	losses := s.losses()
	all, err := s.read(ctx)
	if err != nil {
		return err
	}
	if known := s.index.Load(); len(all) < len(known.all) && s.opts.Store != nil {
		if losses, err = s.opts.Store.CheckDataLost(ctx); err != nil {
			return err
		}
		if losses > known.losses {
			if all, err = s.restore(ctx, known.all); err != nil {
				return err
			}
		}
	}
	idx := buildIndex(all)
	idx.losses = losses
	s.index.Store(idx)
	return nil
}

// losses is the store's count of data losses now.
func (s *Silences) losses() int64 {
	if s.opts.Store == nil {
		return 0
	}
	n, _ := s.opts.Store.DataLost()
	return n
}

// restore writes known back where Redis lost it, leaving what is stored as it is, and reads them all.
func (s *Silences) restore(ctx context.Context, known []Silence) ([]Silence, error) {
	pairs := make([]any, 0, 2*len(known))
	for _, sil := range known {
		b, err := json.Marshal(sil)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, sil.ID, b)
	}
	if _, err := deadline.SetMissing(ctx, s.rdb, s.key, pairs); err != nil {
		return nil, fmt.Errorf("alarm: restore silences: %w", err)
	}
	s.log.Warn("Redis lost the silences; written back from this replica's copy", zap.Int("silences", len(known)))
	return s.read(ctx)
}

// Run reloads the index every Refresh until ctx is done. Beside it, a second loop tends the silences
// that ended: it announces each end once across the replicas (unsilenced) and purges them.
func (s *Silences) Run(ctx context.Context) error {
	tended := make(chan struct{})
	go func() {
		defer close(tended)
		loop.Every(ctx, loop.Options{Interval: s.opts.Refresh, MaxBackoff: 30 * time.Second,
			OnError: func(err error, failures int, retryIn time.Duration) {
				if failures == 1 {
					s.log.Warn("announcing the end of silences failed; retrying", zap.Error(err), zap.Duration("retry_in", retryIn))
				}
			}},
			s.tend)
	}()
	loop.Every(ctx, loop.Options{Interval: s.opts.Refresh, Immediate: true, MaxBackoff: 30 * time.Second,
		OnError: func(err error, _ int, retryIn time.Duration) {
			s.log.Warn("reading silences failed; keeping the last copy", zap.Error(err), zap.Duration("retry_in", retryIn))
		}},
		s.Load)
	<-tended
	return nil
}

// The end of a silence is announced once across replicas through endedKey: SET NX with
// announcingLease while one replica publishes (released when Kafka refuses, so any replica tries again),
// then announcedDone for announcedTTL, past the time the silence may still be stored.
const (
	announcedDone   = "done"
	announcingLease = 30 * time.Second
	announcedTTL    = 15 * time.Minute
	// purgeAfter is how long an ended silence stays listed; giveUpAfter ends the wait for its
	// announcement (a Kafka outage longer than that loses the unsilenced event, logged and counted).
	purgeAfter  = time.Minute
	giveUpAfter = 10 * time.Minute
)

// endedKey guards the announcement of a silence's end; it is built from the silences key, so it shares
// its prefix.
func endedKey(silencesKey, id string) string { return silencesKey + ":ended:" + id }

// tend announces the silences that ended at their time and purges the ones ended long enough ago.
func (s *Silences) tend(ctx context.Context) error {
	now := s.opts.Now()
	all := s.index.Load().all
	stored := make(map[string]bool, len(all))
	var err error
	for _, sil := range all {
		stored[sil.ID] = true
		if err == nil && !sil.Ends.After(now) && !s.announced[sil.ID] {
			err = s.announceEnd(ctx, sil, now)
		}
	}
	for id := range s.announced {
		if !stored[id] {
			delete(s.announced, id)
		}
	}
	s.purge(ctx, now)
	return err
}

// errNotAnnounced fails a tending round whose unsilenced event Kafka did not take, so the loop backs off.
var errNotAnnounced = errors.New("alarm: the unsilenced event was not published")

// announceEnd publishes the unsilenced event of sil, which ended at its time, unless another replica
// does or did.
func (s *Silences) announceEnd(ctx context.Context, sil Silence, now time.Time) error {
	if s.opts.Acts == nil {
		s.announced[sil.ID] = true
		return nil
	}
	key := endedKey(s.key, sil.ID)
	first, err := s.rdb.SetNX(ctx, key, "announcing", announcingLease).Result()
	if err != nil {
		return fmt.Errorf("alarm: announce the end of silence %s: %w", sil.ID, err)
	}
	if !first {
		if v, err := s.rdb.Get(ctx, key).Result(); err == nil && v == announcedDone {
			s.announced[sil.ID] = true
		}
		return nil
	}
	if !s.opts.Acts.Publish(ctx, SilenceEvent(event.Unsilenced, sil, s.deviceType(ctx, sil), Act{}, now)) {
		_ = s.rdb.Del(ctx, key).Err() // any replica may try again; the lease ends it otherwise
		return errNotAnnounced
	}
	s.announced[sil.ID] = true
	if err := s.rdb.Set(ctx, key, announcedDone, announcedTTL).Err(); err != nil {
		return fmt.Errorf("alarm: record the end of silence %s: %w", sil.ID, err)
	}
	return nil
}

// purge deletes silences that ended more than purgeAfter ago and whose end was announced (or waited for
// longer than giveUpAfter), so the hash does not grow forever.
func (s *Silences) purge(ctx context.Context, now time.Time) {
	var ended []string
	for _, sil := range s.index.Load().all {
		if sil.Ends.Before(now.Add(-purgeAfter)) && (s.announced[sil.ID] || sil.Ends.Before(now.Add(-giveUpAfter))) {
			ended = append(ended, sil.ID)
		}
	}
	if len(ended) > 0 {
		if err := s.rdb.HDel(ctx, s.key, ended...).Err(); err != nil {
			s.log.Debug("purging ended silences failed", zap.Error(err))
		}
	}
}

func (s *Silences) read(ctx context.Context) ([]Silence, error) {
	raw, err := s.rdb.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("alarm: read silences: %w", err)
	}
	out := make([]Silence, 0, len(raw))
	for id, v := range raw {
		var sil Silence
		if err := json.Unmarshal([]byte(v), &sil); err != nil {
			s.log.Warn("ignoring unreadable silence", zap.String("id", id), zap.Error(err))
			continue
		}
		out = append(out, sil)
	}
	slices.SortFunc(out, func(a, b Silence) int { return a.Ends.Compare(b.Ends) })
	return out, nil
}

func buildIndex(all []Silence) *silenceIndex {
	idx := &silenceIndex{all: all, byDevice: map[string][]Silence{}, byType: map[string][]Silence{}}
	for _, sil := range all {
		if sil.DeviceID != "" {
			idx.byDevice[sil.DeviceID] = append(idx.byDevice[sil.DeviceID], sil)
		} else {
			idx.byType[sil.DeviceType] = append(idx.byType[sil.DeviceType], sil)
		}
	}
	return idx
}
