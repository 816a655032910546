package testenv

import "syscall"

// SysProcAttr is what testenv starts its children with: the kernel kills a child when the process that
// started it dies without running its cleanups (a test timeout's panic, a SIGKILL), so no orphans keep
// ports and memory on a shared machine. Programs that start their own children can use it too.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
