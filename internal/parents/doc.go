// Package parents stores the parent links of the fleet (docs/concepts.md, "Gateways (parents)"): each
// device's gateway or cell as its signals and registration name it, the children of each parent, the
// parents some device names, and the counter of parents' verdicts. It owns those keys (keys.go); the
// link's writes and their settling are links.go and unlink.go, the named parents and the reads a wake
// makes named.go, the views of down parents kept until the next verdict views.go, and the repair after
// a data loss repair.go.
//
// internal/deadline holds one Links per store (Store.Links) and calls it beside its own writes: a
// refresh queues the links its signals name (QueueSignals), a registration or a delete queues a link
// and settles it (QueueLink, Unlink), and a parent's verdict wakes the children read here
// (WalkChildren) through deadline's scripts on the slots. A device's own state, and so what the alarm
// loop judges a parent by (deadline.Parent, kept in a Views until the next verdict), stays in
// deadline's slots. No Lua script reads these keys
// but this package's own. Everyone else calls Links' methods: the alarm loop and the outputs read
// parents (ParentsOf), the sweeper pays owed unlinks and repairs the named parents (PayUnlinks,
// RepairNamedParents).
package parents
