// Package sweep runs the sweeper: the background pass each replica makes over the slots it owns
// (internal/scan) to repair what the signal and claim paths leave behind. Each pass makes due the dormant
// incidents whose device is back (a recovery probe lost to a crash) and the parked claims whose device
// signalled again, prunes the interruption histories no flapping window counts any more, does the parent
// unlinks Redis failed, names the linked parents again after a data loss, and forgets the devices silent
// longer than retention.forget_after that are not registered.
//
// Every step is one page of one slot, paced so the replicas' passes together take a bounded share of
// Redis (loop.Pacer). The keys and scripts are internal/deadline's and those of the key families beside
// its slots: the sweeper calls deadline.Store's typed operations (SweepDormant, WakeParked,
// ForgetSilent), and those of the flap histories and parent links the store holds (Store.Flaps:
// Prune; Store.Links: PayUnlinks, RepairNamedParents).
package sweep
