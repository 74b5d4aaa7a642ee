//go:build ignore

// Freshpages times writing memory a process has not touched before
// against memory it has, three ways, once a run (docs/performance.md,
// "Memory touched once"): go run scripts/freshpages/main.go [MiB].
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	mib := 60
	if len(os.Args) > 1 {
		n, err := strconv.Atoi(os.Args[1])
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "freshpages: MiB = %q: want a positive integer\n", os.Args[1])
			os.Exit(2)
		}
		mib = n
	}
	n := mib << 20
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	// Each slice is made once: a process's first use of its pages.
	t := time.Now()
	a := make([]byte, n)
	copy(a, src)
	fresh := time.Since(t)

	t = time.Now()
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	copy(b, src)
	touched := time.Since(t)

	t = time.Now()
	copy(a, src) // a's pages are in now
	again := time.Since(t)
	fmt.Printf("%d MiB: copy into fresh pages %v; a store every 4 KiB, then the copy %v; the copy into pages touched before %v\n",
		mib, fresh.Round(time.Millisecond), touched.Round(time.Millisecond), again.Round(time.Millisecond))
}
