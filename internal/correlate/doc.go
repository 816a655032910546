// Package correlate groups interruptions into correlated outages: when at least min_devices devices
// sharing a value (their type, parent or a label) are interrupted within a window, one outage_started
// replaces their repeats, and outage_ended follows when fewer than half of its members are still silent
// (docs/concepts.md, "Correlated outages"). Its Redis keys (keys.go) are its own; it reads the devices'
// state through internal/deadline's methods.
package correlate
