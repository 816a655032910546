//go:build !linux

package main

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent; elsewhere the deferred stops clean up.
func sysProcAttr() *syscall.SysProcAttr { return nil }
