// Package docs holds no code. Its test keeps the documentation in this directory and README.md from
// drifting away from the code: every metric and HTTP route they name must exist.
package docs
