//go:build !linux

package main

// machineMemory is 0 (unknown) where m2n does not read the machine's
// memory: planning then has no memory ceiling beyond --max-ops.
func machineMemory() int64 { return 0 }
