// Package registry stores the device registry's entries (docs/http-api.md, "Device registry"): which
// devices an operator registered, with their labels, in small hashes Redis keeps packed (layout.go), and
// the move from the layout before them.
//
// A registration's type and own timeout are not kept here: the type is folded into the device's deadline
// and the own timeout lives in the overrides table, both internal/deadline's. Its Store.Register writes
// all three together and queues the entry through Queue; its deletes drop the entry through
// QueueDelete, and retention asks Registered before it forgets a device. Everyone else reads labels
// with Labels, on the Registry the deadline store holds (Store.Registry). The package owns the
// registry's keys (keys.go) and imports no other storage package.
package registry
