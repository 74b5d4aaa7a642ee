// Package datadriven runs test scripts kept as data, the way etcd's raft
// keeps its tests: a file of cases, each a command line, input lines, a
// "----" line and the output the command must print, ending at a blank
// line. `go test -update` writes the outputs the code prints now back into
// the files, to be reviewed as a diff.
//
//	# a comment
//	regions
//	src shape=4,4 dtype=bf16 mesh=2 ranks=0-1 place=S(0)
//	dst shape=4,4 dtype=bf16 mesh=2 ranks=2-3 place=S(1)
//	----
//	... what the test prints ...
//
// Outputs have no blank lines. The package is for tests only.
package datadriven

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expected outputs of testdata/*.txt scripts with what the code prints now")

// Case is one case of a script.
type Case struct {
	Pos   string            // file:line of the command
	Cmd   string            // the command: the first word of its line
	Args  map[string]string // the command's key=value arguments; a bare word maps to ""
	Input []string          // the lines between the command and "----"
}

// Arg returns the value of a key=value argument, or def when absent.
func (c *Case) Arg(key, def string) string {
	if v, ok := c.Args[key]; ok {
		return v
	}
	return def
}

type parsed struct {
	c        Case
	want     []string
	from, to int // the expected output's lines in the file, [from, to)
}

// RunFile runs every case of a script through f, which returns what the
// case prints, and compares it with the expected output; with -update it
// writes the outputs into the file instead.
func RunFile(t *testing.T, path string, f func(t *testing.T, c *Case) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	cases, err := parse(path, lines)
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]string, len(cases))
	for i := range cases {
		pc := &cases[i]
		t.Run(fmt.Sprintf("%s/%s", pc.c.Pos, pc.c.Cmd), func(t *testing.T) {
			out := strings.TrimRight(f(t, &pc.c), "\n")
			got[i] = strings.Split(out, "\n")
			if out == "" {
				got[i] = nil
			}
			for _, l := range got[i] {
				if strings.TrimSpace(l) == "" {
					t.Fatalf("the output has a blank line, which would end the case:\n%s", out)
				}
			}
			if !*update && strings.Join(got[i], "\n") != strings.Join(pc.want, "\n") {
				t.Errorf("%s: output differs (go test -update writes it; review the diff)\n--- got ---\n%s\n--- want ---\n%s", pc.c.Pos, out, strings.Join(pc.want, "\n"))
			}
		})
	}
	if !*update {
		return
	}
	var out []string
	last := 0
	for i, pc := range cases {
		out = append(out, lines[last:pc.from]...)
		out = append(out, got[i]...)
		last = pc.to
	}
	out = append(out, lines[last:]...)
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func parse(path string, lines []string) ([]parsed, error) {
	var out []parsed
	for i := 0; i < len(lines); {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			i++
			continue
		}
		fields := strings.Fields(l)
		pc := parsed{c: Case{Pos: fmt.Sprintf("%s:%d", path, i+1), Cmd: fields[0], Args: map[string]string{}}}
		for _, a := range fields[1:] {
			k, v, _ := strings.Cut(a, "=")
			pc.c.Args[k] = v
		}
		i++
		for ; i < len(lines) && lines[i] != "----"; i++ {
			if strings.TrimSpace(lines[i]) == "" {
				return nil, fmt.Errorf("%s: a blank line before ----", pc.c.Pos)
			}
			pc.c.Input = append(pc.c.Input, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s: no ---- line", pc.c.Pos)
		}
		i++
		pc.from = i
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			pc.want = append(pc.want, lines[i])
		}
		pc.to = i
		out = append(out, pc)
	}
	return out, nil
}

// Lines builds a case's output line by line.
type Lines struct{ b strings.Builder }

// Printf adds a formatted line.
func (l *Lines) Printf(format string, args ...any) {
	fmt.Fprintf(&l.b, format, args...)
	l.b.WriteByte('\n')
}

func (l *Lines) String() string { return l.b.String() }
