package main

import (
	"os"
	"path/filepath"
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
	// Two outputs that are one file (the same path, or two names of it
	// through a link): the second would replace the first.
	for i := 0; i+1 < len(flags); i += 2 {
		for j := i + 2; j+1 < len(flags); j += 2 {
			a, b := flags[i+1], flags[j+1]
			if a == "" || b == "" || a == atomicfile.Stdout || b == atomicfile.Stdout {
				continue
			}
			if sameFile(a, b) {
				return false, usagef("%s %s and %s %s are one file; give each output its own", flags[i], a, flags[j], b)
			}
		}
	}
	return len(named) == 1, nil
}

// sameFile reports whether paths a and b name one file: the same file when
// both exist, else the same absolute path once links are resolved (in the
// directory, for a file not made yet).
func sameFile(a, b string) bool {
	sa, ea := os.Stat(a)
	sb, eb := os.Stat(b)
	if ea == nil && eb == nil {
		return os.SameFile(sa, sb)
	}
	return resolved(a) == resolved(b)
}

// resolved is a path made absolute, with the links of it (or, for a file
// not made yet, of its directory) resolved.
func resolved(p string) string {
	// Follow links by hand, so a link to a file not made yet resolves too.
	for range 40 {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		t, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p = t
	}
	if d, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		p = filepath.Join(d, filepath.Base(p))
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}
