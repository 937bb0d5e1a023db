//go:build !linux

package robustness

import "syscall"

// procAttr: elsewhere, nodes are killed at cleanup only.
func procAttr() *syscall.SysProcAttr { return nil }
