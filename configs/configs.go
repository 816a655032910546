// Package configs carries the shipped configuration files into the binary, so `heartbeatd dev` runs from
// any directory.
package configs

import _ "embed"

// Dev is configs/dev.yaml: short timeouts and readable logs for a local stack.
//
//go:embed dev.yaml
var Dev []byte
