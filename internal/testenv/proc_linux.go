package testenv

import "syscall"

// sysProcAttr kills the server when the test binary dies without running its cleanups (a test timeout's
// panic, a SIGKILL), so no orphans keep ports and memory on a shared machine.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
