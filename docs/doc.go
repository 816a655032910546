// Package docs holds no code. Its test keeps the documentation in this directory and README.md from
// drifting away from the code: every metric, HTTP route and event kind they name must exist, every
// configuration snippet must load merged onto configs/heartbeatd.yaml, every example event must
// validate against api/event.schema.json with the id heartbeatd would give it, and every section a code
// comment cites or a page links to must be a heading of its page.
package docs
