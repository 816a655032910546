package silence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// End ends a silence at once; false when there was none with that id. The incidents it deferred are
// re-armed first (rearm), so still-silent devices alarm now rather than when it would have ended; then
// it is deleted and its unsilenced event, carrying act, goes out once (endedKey guards it against the
// tending loop announcing the same end).
func (s *Silences) End(ctx context.Context, id string, act event.Act) (bool, error) {
	raw, err := s.rdb.HGet(ctx, s.key, id).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("silence: end silence: %w", err)
	}
	var sil Silence
	readable := json.Unmarshal([]byte(raw), &sil) == nil
	now := s.opts.Now()
	if readable && sil.Ends.After(now) {
		// Before the delete: when re-arming fails the silence stays and the caller may try again.
		n, err := s.rearm(ctx, sil, now)
		if err != nil {
			return false, err
		}
		if n > 0 {
			s.log.Info("re-armed the incidents the silence deferred", zap.String("id", id), zap.Int("incidents", n))
		}
	}
	n, err := s.rdb.HDel(ctx, s.key, id).Result()
	if err != nil {
		return false, fmt.Errorf("silence: delete silence: %w", err)
	}
	if n == 0 {
		return false, s.Load(ctx) // ended by a concurrent call
	}
	s.log.Info("silence deleted", zap.String("id", id), zap.String("by", act.By))
	err = s.Load(ctx)
	if readable && s.opts.Events != nil {
		first, gerr := s.rdb.SetNX(ctx, endedKey(s.key, id), announcedDone, announcedTTL).Result()
		switch {
		case gerr != nil:
			s.log.Warn("the silence is deleted, but its unsilenced event is not published: Redis failed the guard",
				zap.String("id", id), zap.Error(gerr))
		case first:
			s.opts.Events.Publish(ctx, eventOf(event.Unsilenced, sil, s.deviceType(ctx, sil), act, now))
		}
	}
	return true, err
}

// rearm brings forward the next act of the incidents sil deferred, to now + two index refreshes: by
// then every replica's index has dropped the ended silence, so the claim is not deferred again. The
// deadline store owns the alarms set and finds them (deadline.Store.RearmDevice, RearmType). It returns
// how many incidents it moved.
func (s *Silences) rearm(ctx context.Context, sil Silence, now time.Time) (int, error) {
	store := s.opts.Store
	if store == nil {
		return 0, nil
	}
	at := now.Add(2 * s.opts.Refresh)
	// What it deferred waits for its end, or a recurring one's for the end of its current spell.
	deferredTo := sil.Ends
	if len(sil.TimeIntervals) > 0 {
		c, _ := compile(sil, s.opts.Intervals)
		if deferredTo = c.activeUntil(now); deferredTo.IsZero() {
			return 0, nil // outside its intervals it deferred nothing
		}
	}
	switch {
	case sil.DeviceID != "":
		return store.RearmDevice(ctx, sil.DeviceID, deferredTo, at)
	case sil.DeviceType != "":
		return store.RearmType(ctx, sil.DeviceType, deferredTo, at)
	}
	// Matchers only: finding what it deferred would scan every incident; they act at the time it
	// deferred them to (docs/schedules.md).
	return 0, nil
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
var errNotAnnounced = errors.New("silence: the unsilenced event was not published")

// announceEnd publishes the unsilenced event of sil, which ended at its time, unless another replica
// does or did.
func (s *Silences) announceEnd(ctx context.Context, sil Silence, now time.Time) error {
	if s.opts.Events == nil {
		s.announced[sil.ID] = true
		return nil
	}
	key := endedKey(s.key, sil.ID)
	first, err := s.rdb.SetNX(ctx, key, "announcing", announcingLease).Result()
	if err != nil {
		return fmt.Errorf("silence: announce the end of silence %s: %w", sil.ID, err)
	}
	if !first {
		if v, err := s.rdb.Get(ctx, key).Result(); err == nil && v == announcedDone {
			s.announced[sil.ID] = true
		}
		return nil
	}
	if !s.opts.Events.Publish(ctx, eventOf(event.Unsilenced, sil, s.deviceType(ctx, sil), event.Act{}, now)) {
		_ = s.rdb.Del(ctx, key).Err() // any replica may try again; the lease ends it otherwise
		return errNotAnnounced
	}
	s.announced[sil.ID] = true
	if err := s.rdb.Set(ctx, key, announcedDone, announcedTTL).Err(); err != nil {
		return fmt.Errorf("silence: record the end of silence %s: %w", sil.ID, err)
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
