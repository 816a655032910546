package alarm

import (
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

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
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
	Now     func() time.Time
	Logger  *zap.Logger
}

// Silences keeps silences in one Redis hash shared by every replica, and an in-memory index of them so
// the alarm loop's per-claim check costs two map lookups, not a round trip.
type Silences struct {
	rdb   redis.UniversalClient
	key   string
	opts  SilencesOptions
	log   *zap.Logger
	index atomic.Pointer[silenceIndex]
}

// silenceIndex is an immutable snapshot: the latest end per device and per type, of every stored silence.
type silenceIndex struct {
	all      []Silence
	byDevice map[string][]Silence
	byType   map[string][]Silence
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
	s := &Silences{rdb: rdb, key: keys.Silences(), opts: opts, log: opts.Logger.With(zap.String("component", "silences"))}
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
	case len(sil.Comment) > 1024:
		return Silence{}, fmt.Errorf("%w: comment is at most 1024 bytes", ErrInvalidSilence)
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
	return sil, s.Load(ctx)
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

// Delete ends a silence at once; false when there was none with that id. Devices it had deferred are
// looked at when it would have ended (their next act was scheduled then).
func (s *Silences) Delete(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.key, id).Result()
	if err != nil {
		return false, fmt.Errorf("alarm: delete silence: %w", err)
	}
	if n > 0 {
		s.log.Info("silence deleted", zap.String("id", id))
	}
	return n > 0, s.Load(ctx)
}

// SilencedUntil is when the latest silence covering device (of type typ) at now ends; zero when none does.
// It reads the in-memory index only.
func (s *Silences) SilencedUntil(device, typ string, now time.Time) time.Time {
	idx := s.index.Load()
	var until time.Time
	for _, list := range [][]Silence{idx.byDevice[device], idx.byType[typ]} {
		for _, sil := range list {
			if !sil.Starts.After(now) && sil.Ends.After(now) && sil.Ends.After(until) {
				until = sil.Ends
			}
		}
	}
	return until
}

// Load re-reads every silence into the in-memory index.
func (s *Silences) Load(ctx context.Context) error {
	all, err := s.read(ctx)
	if err != nil {
		return err
	}
	s.index.Store(buildIndex(all))
	return nil
}

// Run reloads the index every Refresh and removes silences that ended, until ctx is done.
func (s *Silences) Run(ctx context.Context) error {
	loop.Every(ctx, loop.Options{Interval: s.opts.Refresh, Immediate: true, MaxBackoff: 30 * time.Second,
		OnError: func(err error, _ int, retryIn time.Duration) {
			s.log.Warn("reading silences failed; keeping the last copy", zap.Error(err), zap.Duration("retry_in", retryIn))
		}},
		func(ctx context.Context) error {
			if err := s.Load(ctx); err != nil {
				return err
			}
			s.purge(ctx)
			return nil
		})
	return nil
}

// purge deletes silences that ended more than a minute ago, so the hash does not grow forever.
func (s *Silences) purge(ctx context.Context) {
	now := s.opts.Now()
	var ended []string
	for _, sil := range s.index.Load().all {
		if sil.Ends.Before(now.Add(-time.Minute)) {
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
