package main

import "syscall"

// sysProcAttr has the kernel kill a child when hbbench dies without running its cleanups (SIGKILL, a
// panic), so no redis-server, mosquitto or heartbeatd is left holding ports and memory.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
