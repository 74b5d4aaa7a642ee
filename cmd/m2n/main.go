// Command m2n plans, simulates and runs M-to-N tensor resharding. Run
// `m2n help` for the commands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
)

func main() {
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
