// Package overrides stores the per-device timeouts of registered devices (docs/http-api.md, "Device
// registry"): each such device's own timeout type name, "<type>@<timeout>" (typeindex.OwnTypeName), in
// one hash with a version counter bumped on every change. Each replica keeps the table in memory (Table,
// read again when the version moved) and records a signal of such a device under that name, so its
// deadline is the signal time + its own timeout, whatever type the signal names.
//
// It owns those keys (keys.go). internal/deadline holds the Table and is its one caller: its
// registrations and deletes queue the changes with their own writes, its SyncOverrides reads the table
// (registering the names in the type registry first), and after a data loss the table this replica
// holds is written back. The package imports no other storage package.
package overrides
