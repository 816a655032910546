//go:build !linux

package testenv

import "syscall"

// SysProcAttr: only Linux ties a child's life to its parent; elsewhere the cleanups stop the children.
func SysProcAttr() *syscall.SysProcAttr { return nil }
