package scan

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// assign returns the slots replica wins by rendezvous hashing over replicas: each slot goes to the
// replica with the highest hash of (replica, slot). When a replica joins or leaves, only the slots it wins
// or held move; every other slot stays where it was.
func assign(replica string, replicas []string, slots int) []int {
	var mine []int
	for s := range slots {
		if owner(s, replicas) == replica {
			mine = append(mine, s)
		}
	}
	return mine
}

// owner returns the replica that wins slot among replicas ("" when there is none).
func owner(slot int, replicas []string) string {
	var best string
	var bestScore uint64
	for _, r := range replicas {
		h := fnv.New64a()
		h.Write([]byte(r))
		h.Write([]byte{'/'})
		h.Write([]byte(strconv.Itoa(slot)))
		// fnv alone clusters on inputs that differ only in their last bytes; one mixing step spreads it.
		sc := mix64(h.Sum64())
		if best == "" || sc > bestScore || (sc == bestScore && r < best) {
			best, bestScore = r, sc
		}
	}
	return best
}

// mix64 is the splitmix64 finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// OwnershipOptions configures slot ownership among replicas.
type OwnershipOptions struct {
	ReplicaID string
	// Heartbeat is how often the replica announces itself and renews its leases (cluster.replica_heartbeat).
	Heartbeat time.Duration
	// SlotLease is how long a lease outlives its last renewal, and how long a silent replica counts as
	// alive (cluster.slot_lease): a dead replica's slots move within SlotLease of its last heartbeat.
	SlotLease time.Duration
	// RetireAfter is how long a slot doubling settles before the old layout is retired: the longest
	// timeout plus the longest repeat cycle, so every old entry has come due by then.
	RetireAfter time.Duration
	// Now is the clock of the alive marks in the replica set, shared by every replica (Redis TIME
	// corrected, internal/holdback.Clock), so a skewed replica neither looks dead nor drops live ones; nil =
	// time.Now.
	Now func() time.Time
	// Eligible, when set and false, makes the replica step aside: it releases its leases and leaves the
	// replica set, so the others scan its slots (a replica whose clock cannot be trusted).
	Eligible func() bool
	Logger   *zap.Logger
}

// Ownership keeps this replica's share of the slots: it registers the replica, follows the live set,
// and holds a lease on each slot it wins. Correctness never rests on the leases (claims are atomic); they
// only keep two replicas from scanning one slot at once.
type Ownership struct {
	store *deadline.Store
	opts  OwnershipOptions
	log   *zap.Logger

	mu      sync.RWMutex
	held    []int
	renewed time.Time // last successful renewal
	changed chan struct{}

	lostSeen int64         // the store's data losses already logged; tick's alone
	soon     time.Duration // how soon the next tick must come, 0 = a heartbeat; tick's alone (loop.Options.Sooner)
	retakes  int           // ticks in a row that came retakeWait early for a leased slot; tick's alone
}

// lapseSlack is how long after a peer's alive mark lapses ownership looks again: the peer renewed its
// slot leases just after its mark, so they run out a moment later.
const lapseSlack = 50 * time.Millisecond

// retakeWait is how soon ownership asks again for slots it should hold but found leased (a dead peer's
// lease about to run out, or a live one's it gives up at its own next heartbeat), at most maxRetakes
// times in a row: replicas that disagree on a slot for long (a rolling upgrade) cost a heartbeat's load.
const (
	retakeWait = 200 * time.Millisecond
	maxRetakes = 5
)

// NewOwnership returns the ownership of store's slots for one replica; Run maintains it.
func NewOwnership(store *deadline.Store, opts OwnershipOptions) *Ownership {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = config.DefaultReplicaHeartbeat
	}
	if opts.SlotLease <= 0 {
		opts.SlotLease = config.DefaultSlotLease
	}
	if opts.SlotLease <= opts.Heartbeat {
		opts.SlotLease = 4 * opts.Heartbeat // a lease must outlive its renewal
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Ownership{store: store, opts: opts, log: opts.Logger.With(zap.String("component", "ownership")), changed: make(chan struct{}, 1)}
}

// Slots returns the slots this replica holds now.
func (o *Ownership) Slots() []int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.held
}

// Changed fires after the held slots changed (a scanner's Wake).
func (o *Ownership) Changed() <-chan struct{} { return o.changed }

// Run renews ownership every heartbeat until ctx is done, then releases every lease and leaves the live
// set, so the other replicas take the slots over at once. A failed renewal is retried within a heartbeat
// (jittered, not backed off further): leases lapse after SlotLease, so waiting longer only moves slots.
func (o *Ownership) Run(ctx context.Context) error {
	loop.Every(ctx, loop.Options{Interval: o.opts.Heartbeat, Immediate: true,
		OnError: func(err error, failures int, _ time.Duration) {
			if failures == 1 {
				o.log.Error("slot ownership renewal failed; keeping leases until they lapse", zap.Error(err))
			}
		},
		OnRecover: func(int) { o.log.Info("slot ownership renewal works again") },
		Sooner:    func() time.Duration { return o.soon }},
		o.tick)
	o.release()
	return nil
}

func (o *Ownership) tick(ctx context.Context) error {
	o.soon = 0
	if o.opts.Eligible != nil && !o.opts.Eligible() {
		had := len(o.Slots())
		o.release()
		if had > 0 {
			o.log.Warn("not eligible to scan: every slot handed to the other replicas", zap.Int("slots", had))
			select {
			case o.changed <- struct{}{}:
			default:
			}
		}
		return nil
	}
	before := o.store.Layout()
	l, err := o.store.RefreshLayout(ctx)
	if err != nil {
		o.lapse()
		return err
	}
	if l.Slots != before.Slots {
		o.log.Info("slot layout changed", zap.Int("slots", l.Slots), zap.Int("previous", before.Slots))
	}
	if n, at := o.store.DataLost(); n > o.lostSeen {
		o.lostSeen = n
		o.log.Error("Redis lost heartbeatd's data (the slot layout written anew, or a slot's epoch marker gone from its master); what Redis alone held is gone "+
			"(/readyz notes say what), the parent links, type names and per-device timeouts this replica remembers are written again", zap.Time("noticed", at))
	}
	if l.Moving() && o.opts.RetireAfter > 0 {
		if retired, err := o.store.RetireLayout(ctx, o.opts.RetireAfter); err != nil {
			o.log.Warn("retiring the old slot layout failed; retrying", zap.Error(err))
		} else if retired {
			o.log.Info("old slot layout retired", zap.Int("slots", l.Slots), zap.Int("previous", l.Previous))
		}
	}
	live, err := o.store.Replicas().Join(ctx, o.opts.ReplicaID, o.opts.Now(), o.opts.SlotLease)
	if err != nil {
		o.lapse()
		return err
	}
	if !live.NextLapse.IsZero() {
		// A dead peer's slots are taken when its mark lapses, not up to a heartbeat later.
		o.soon = max(live.NextLapse.Sub(o.opts.Now()), 0) + lapseSlack
	}
	want := assign(o.opts.ReplicaID, live.Replicas, o.store.Slots())
	var gone []int
	for _, s := range o.Slots() {
		if !slices.Contains(want, s) {
			gone = append(gone, s)
		}
	}
	if len(want)+len(gone) == 0 {
		o.setHeld(nil)
		return nil
	}
	mine, err := o.store.Replicas().LeaseSlots(ctx, o.opts.ReplicaID, want, gone, o.opts.SlotLease)
	if err != nil {
		o.lapse()
		return err
	}
	var held []int
	for i, s := range want {
		if mine[i] {
			held = append(held, s)
		}
	}
	switch {
	case len(held) == len(want):
		o.retakes = 0
	case o.retakes < maxRetakes && (o.soon == 0 || o.soon > retakeWait):
		o.retakes++
		o.soon = retakeWait
	}
	o.setHeld(held)
	return nil
}

// lapse is called when renewal failed: the slots stay held until their leases could have run out (claims
// fail anyway while Redis is unreachable), then they are let go, since another replica may hold them.
func (o *Ownership) lapse() {
	o.mu.RLock()
	expired := time.Since(o.renewed) > o.opts.SlotLease
	o.mu.RUnlock()
	if expired {
		o.setHeld(nil)
	}
}

func (o *Ownership) setHeld(held []int) {
	o.mu.Lock()
	same := slices.Equal(o.held, held)
	o.held = held
	if held != nil {
		o.renewed = time.Now()
	}
	o.mu.Unlock()
	if !same {
		o.log.Info("slots owned", zap.Int("count", len(held)))
		select {
		case o.changed <- struct{}{}:
		default:
		}
	}
}

func (o *Ownership) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if held := o.Slots(); len(held) > 0 {
		if _, err := o.store.Replicas().LeaseSlots(ctx, o.opts.ReplicaID, nil, held, 0); err != nil {
			o.log.Warn("releasing slot leases failed; they lapse by themselves", zap.Error(err))
		}
	}
	if err := o.store.Replicas().Leave(ctx, o.opts.ReplicaID); err != nil {
		o.log.Warn("leaving the replica set failed", zap.Error(err))
	}
	o.mu.Lock()
	o.held = nil
	o.mu.Unlock()
}
