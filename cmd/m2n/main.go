// Command m2n plans, simulates and runs M-to-N tensor resharding. Run
// `m2n help` for the commands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
)

// gcPercent is the Go runtime's GOGC m2n sets unless the environment sets
// one: its heap holds large, long-lived schedules and simulation state,
// and at Go's default of 100 garbage let the heap reach twice what is
// live. 25 keeps it near 1.25x: one 2,048-GPU scaling-dsv3 point 9.55 ->
// 6.22 GB peak (99.5 s, 111 s before), dsv3-256 every route 1.22 -> 0.89
// GB for 7.40 -> 7.43 s (docs/performance.md).
const gcPercent = 25

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	// M2N_CPUPROFILE=FILE writes the host's CPU profile of the whole
	// command (go tool pprof reads it): where host time goes, for example
	// in issuing a run's iterations (docs/native.md).
	if path := os.Getenv("M2N_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "m2n: M2N_CPUPROFILE: %v\n", err)
			os.Exit(exitError)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code != exitOK {
		pprof.StopCPUProfile()
		os.Exit(code)
	}
}
