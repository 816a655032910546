package silence

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/internal/redisutil"
	"github.com/heartbeatd/heartbeatd/pkg/client"
	"github.com/heartbeatd/heartbeatd/pkg/event"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// Silence is a maintenance window, in the API's wire shape (pkg/client); matchers.go checks and
// compiles it.
type Silence = client.Silence

// ErrInvalid is wrapped by Create for a silence that cannot be stored; the message says why. Matchers
// too costly to evaluate on every claim wrap matcher.ErrCostly as well.
var ErrInvalid = errors.New("invalid silence")

// MaxStored bounds the stored silences (ended ones count until they are purged, a minute after their
// end): every replica re-reads all of them every second and checks them on every claim.
const MaxStored = 1000

// ErrTooMany is wrapped by Create when MaxStored are stored.
var ErrTooMany = errors.New("too many silences")

// createSilenceScript stores a silence unless the hash is full, in one step, so concurrent creates
// through several replicas cannot overshoot the bound.
//
// A named token's silences are bounded too (ARGV[5], 0 = no bound), counted over the stored ones: at most
// MaxStored decodes, on a create only.
//
// KEYS[1] silences hash; ARGV[1] bound, ARGV[2] id, ARGV[3] JSON, ARGV[4] token, ARGV[5] token's bound.
// Reply: 1 stored, 0 full, -1 the token's share full.
var createSilenceScript = redis.NewScript(`
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local share = tonumber(ARGV[5])
if ARGV[4] ~= '' and share > 0 then
  local n = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
    local ok, s = pcall(cjson.decode, v)
    if ok and s.token == ARGV[4] then n = n + 1 end
  end
  if n >= share then return -1 end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
return 1`)

// Options configures a Silences store.
type Options struct {
	// Refresh is how often the in-memory copy is re-read, so a silence created through another replica
	// applies here within this long (default 1s).
	Refresh time.Duration
	// Store names a silenced device's type for the silence's events and lets End re-arm the incidents a
	// silence deferred; nil = neither (the incidents alarm when the silence would have ended).
	Store *deadline.Store
	// Events publishes silenced and unsilenced (docs/events.md); nil = no events.
	Events Publisher
	// KeyPrefix is config redis.key_prefix ("" = its default), the prefix of internal/deadline's keys too.
	KeyPrefix string
	// Intervals resolves the names of recurring silences' time_intervals under the configuration in
	// force (a reload applies at the next index refresh); nil = none are defined.
	Intervals func(name string) *schedule.Interval
	// PerToken bounds the stored silences one named token created (http.max_silences_per_token; 0 = only
	// MaxStored bounds them).
	PerToken int
	Now      func() time.Time
	Logger   *zap.Logger
}

// Silences keeps silences in one Redis hash shared by every replica, and an in-memory index of them so
// the alarm loop's per-claim check costs two map lookups, not a round trip.
type Silences struct {
	rdb   redis.UniversalClient
	key   string
	opts  Options
	log   *zap.Logger
	index atomic.Pointer[silenceIndex]
	// announced holds the ended silences whose unsilenced event went out (here or on another replica);
	// only the tending loop touches it.
	announced map[string]bool
}

// silenceIndex is an immutable snapshot of every stored silence, compiled, by device, by type, and the
// rest (matchers only).
type silenceIndex struct {
	all      []Silence
	byDevice map[string][]compiled
	byType   map[string][]compiled
	rest     []compiled
	byID     map[string]*compiled
	// needsFacts: some silence matches on labels or parents, which a claim does not carry.
	needsFacts bool
	// losses is how many times the store had found Redis without its data when the snapshot was read.
	losses int64
}

// New returns the store; Load or Run fills its in-memory index.
func New(rdb redis.UniversalClient, opts Options) *Silences {
	opts.Refresh = defaults.Positive(opts.Refresh, time.Second)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	s := &Silences{rdb: rdb, key: silencesKey(opts.KeyPrefix), opts: opts, log: opts.Logger.With(zap.String("component", "silences")),
		announced: map[string]bool{}}
	s.index.Store(s.buildIndex(nil))
	return s
}

// Create stores s (exactly one of DeviceID and DeviceType; Ends in the future; Starts defaults to now)
// and returns it with its new id.
func (s *Silences) Create(ctx context.Context, sil Silence) (Silence, error) {
	now := s.opts.Now()
	// Cost first: a silence of thousands of matchers, or of one huge expression, is refused before any
	// is compiled. Only new silences are held to it; stored ones keep applying.
	if err := matcher.CheckCost(sil.Matchers); err != nil {
		return Silence{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c, err := compile(sil, s.opts.Intervals)
	if err == nil {
		err = validateSelection(sil, c)
	}
	if err != nil {
		return Silence{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(sil.TimeIntervals) > 0 && sil.Ends.IsZero() {
		sil.Ends = client.RecurringEnds
	}
	switch {
	case len(sil.DeviceID) > 256 || len(sil.DeviceType) > 256:
		return Silence{}, fmt.Errorf("%w: device_id and device_type are at most 256 bytes", ErrInvalid)
	case len(sil.Comment) > event.MaxActNote:
		return Silence{}, fmt.Errorf("%w: comment is at most %d bytes", ErrInvalid, event.MaxActNote)
	case len(sil.By) > event.MaxActBy:
		return Silence{}, fmt.Errorf("%w: by is at most %d bytes", ErrInvalid, event.MaxActBy)
	}
	if sil.Starts.IsZero() {
		sil.Starts = now
	}
	if !sil.Ends.After(now) || !sil.Ends.After(sil.Starts) {
		return Silence{}, fmt.Errorf("%w: it must end in the future and after it starts", ErrInvalid)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	sil.ID = hex.EncodeToString(id[:])
	sil.Starts, sil.Ends = sil.Starts.UTC().Truncate(time.Millisecond), sil.Ends.UTC().Truncate(time.Millisecond)
	b, err := json.Marshal(sil)
	if err != nil {
		return Silence{}, err
	}
	stored, err := createSilenceScript.Run(ctx, s.rdb, []string{s.key}, MaxStored, sil.ID, b, sil.Token, s.opts.PerToken).Int()
	if err != nil {
		return Silence{}, fmt.Errorf("silence: store silence: %w", err)
	}
	switch stored {
	case 0:
		return Silence{}, fmt.Errorf("%w: %d are stored, the most allowed; delete some first", ErrTooMany, MaxStored)
	case -1:
		return Silence{}, fmt.Errorf("%w: token %q has %d stored, its share (http.max_silences_per_token); delete some first",
			ErrTooMany, sil.Token, s.opts.PerToken)
	}
	s.log.Info("silence created", zap.String("id", sil.ID), zap.String("device_id", sil.DeviceID),
		zap.String("device_type", sil.DeviceType), zap.Time("ends", sil.Ends))
	// The index first: the alarm loop honours the silence before consumers hear of it.
	err = s.Load(ctx)
	if s.opts.Events != nil {
		s.opts.Events.Publish(ctx, eventOf(event.Silenced, sil, s.deviceType(ctx, sil), event.Act{By: sil.By, Note: sil.Comment, Token: sil.Token}, now))
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

// delete ends a silence at once, by no one in particular: End with no act.
func (s *Silences) delete(ctx context.Context, id string) (bool, error) {
	return s.End(ctx, id, event.Act{})
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
	return d.Type
}

// SilencedUntil is when the latest silence covering device (of type typ) at now ends; zero when none does.
// It reads the in-memory index only; a matcher on labels or the parent sees them empty (SilencedUntilFacts
// does not).
func (s *Silences) SilencedUntil(device, typ string, now time.Time) time.Time {
	return s.SilencedUntilFacts(Facts{DeviceID: device, DeviceType: typ}, now)
}

// SilencedUntilFacts is SilencedUntil for a device whose parent and labels are known.
func (s *Silences) SilencedUntilFacts(f Facts, now time.Time) time.Time {
	idx := s.index.Load()
	var until time.Time
	for _, list := range [][]compiled{idx.byDevice[f.DeviceID], idx.byType[f.DeviceType], idx.rest} {
		for i := range list {
			if end := list[i].activeUntil(now); end.After(until) && list[i].matches(f) {
				until = end
			}
		}
	}
	return until
}

// NeedsFacts reports whether some silence matches on labels or parents: then the alarm loop reads them
// for its claims and asks SilencedUntilFacts.
func (s *Silences) NeedsFacts() bool { return s.index.Load().needsFacts }

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
	idx := s.buildIndex(all)
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
	if _, err := redisutil.SetMissing(ctx, s.rdb, s.key, pairs); err != nil {
		return nil, fmt.Errorf("silence: restore silences: %w", err)
	}
	s.log.Warn("Redis lost the silences; written back from this replica's copy", zap.Int("silences", len(known)))
	return s.read(ctx)
}

func (s *Silences) read(ctx context.Context) ([]Silence, error) {
	raw, err := s.rdb.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("silence: read silences: %w", err)
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

// buildIndex compiles every silence. One whose intervals the configuration no longer defines is kept,
// listed, and covers nothing until they are defined again or it is deleted.
func (s *Silences) buildIndex(all []Silence) *silenceIndex {
	prev := s.index.Load()
	idx := &silenceIndex{all: all, byDevice: map[string][]compiled{}, byType: map[string][]compiled{}, byID: map[string]*compiled{}}
	for _, sil := range all {
		var before *compiled
		if prev != nil {
			before = prev.byID[sil.ID]
		}
		c, err := recompile(before, sil, s.opts.Intervals)
		idx.byID[sil.ID] = &c
		if err != nil && !c.unknown {
			if before == nil || before.err == nil { // once, not at every refresh
				s.log.Warn("ignoring a silence that does not compile", zap.String("id", sil.ID), zap.Error(err))
			}
			continue
		}
		for i := range c.matchers {
			idx.needsFacts = idx.needsFacts || c.matchers[i].NeedsFacts()
		}
		switch {
		case sil.DeviceID != "":
			idx.byDevice[sil.DeviceID] = append(idx.byDevice[sil.DeviceID], c)
		case sil.DeviceType != "":
			idx.byType[sil.DeviceType] = append(idx.byType[sil.DeviceType], c)
		default:
			idx.rest = append(idx.rest, c)
		}
	}
	return idx
}
