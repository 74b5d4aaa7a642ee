//go:build linux

package main

import "syscall"

// machineMemory is this machine's memory in bytes (0 when it cannot be
// read): the ceiling on what planning may take.
func machineMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
