package main

import (
	"strings"

	"github.com/m2n-project/m2n/internal/atomicfile"
)

// toStdout checks the output-file flags, given as name, value pairs (for
// example "--trace", *trace): at most one of them may be "-", the standard
// output, and not with --json, since each needs stdout to itself. It
// reports whether one is "-": the command then prints nothing else on
// stdout.
func toStdout(asJSON bool, flags ...string) (bool, error) {
	var named []string
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i+1] == atomicfile.Stdout {
			named = append(named, flags[i])
		}
	}
	switch {
	case len(named) > 1:
		return false, usagef("%s are all - (the standard output), which holds one file; give the others a file name", strings.Join(named, " and "))
	case len(named) == 1 && asJSON:
		return false, usagef("%s - and --json both write to the standard output; give %s a file name, or drop --json", named[0], named[0])
	}
	return len(named) == 1, nil
}
