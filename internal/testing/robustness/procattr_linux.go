package robustness

import "syscall"

// procAttr makes the kernel kill a node when the harness dies (a test
// timeout, ^C), so that no kvd outlives the test that started it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
