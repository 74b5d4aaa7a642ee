package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/m2n-project/m2n/internal/atomicfile"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/scenarios"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1 // the command failed: bad input, a wrong byte, a device error
	exitUsage    = 2 // the command line itself is wrong
	exitMismatch = 3 // `--check` found wrong bytes
)

// usageError marks an error in the command line, which exits with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitCoder lets an error choose its exit status.
type exitCoder interface{ ExitCode() int }

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a command may touch: its arguments and its output streams.
type env struct {
	stdout, stderr io.Writer
}

func commands() []command {
	return []command{
		{"plan", "derive regions and schedules; print a summary, write the IR", runPlan},
		{"sim", "simulate each route: modeled time beside the SOL bound", runSim},
		{"run", "run each route on GPUs, verify every byte, time it", runRun},
		{"topo", "list the GPUs, their NVLink links and domains", runTopo},
		{"calibrate", "measure the executor model's constants on GPUs; write a measured preset", runCalibrate},
		{"report", "simulate every point and route; write a Markdown report, CSV and charts", runReport},
		{"verify", "check a schedule IR file, and run it on the host", runVerify},
		{"version", "print the version", runVersion},
	}
}

// Main runs m2n with the arguments after the program name and returns the
// exit status. Errors go to stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	err := dispatch(ctx, e, args)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	// The message is the last line, for scripts that keep only that; a
	// usage error's hint comes before it.
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "run 'm2n help' for usage")
		fmt.Fprintf(stderr, "m2n: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "m2n: %v\n", err)
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return exitError
}

func dispatch(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		usage(e.stdout)
		return nil
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		if len(args) > 1 {
			return dispatch(ctx, e, []string{args[1], "--help"})
		}
		usage(e.stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, e, args[1:])
		}
	}
	return usagef("unknown command %q", name)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `m2n plans, simulates and runs M-to-N tensor resharding.

Usage:
  m2n <command> [flags] [SCENARIO]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
SCENARIO is a TOML file, or the name of a scenario built into m2n
(%s); without one, m2n uses %s.
Every command takes --help and --json (machine-readable output on stdout).
`, strings.Join(scenarios.Names(), ", "), scenarios.Default)
}

// flags is a command's flag set with its --help text.
type flags struct {
	*flag.FlagSet
	name string
	help func()
}

// newFlags returns a flag set for a command. Its usage goes to stdout on
// --help only; a bad flag is a usage error on stderr.
func newFlags(e *env, name, synopsis, about string) *flags {
	fs := flag.NewFlagSet("m2n "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flags{FlagSet: fs, name: name, help: func() {
		fmt.Fprintf(e.stdout, "Usage: m2n %s %s\n\n%s\n\nFlags:\n", name, synopsis, about)
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}}
}

// parse parses flags anywhere among the arguments (flag stops at the first
// positional one) and returns the positional arguments.
func (fs *flags) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.help()
				return nil, err
			}
			return nil, usagef("%s: %v", fs.name, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// loadScenario reads a scenario from a file path or, when no such file
// exists, from the scenarios built into m2n; "" means the default.
func loadScenario(arg string) (*scenario.Scenario, error) {
	if arg == "" {
		arg = scenarios.Default
	}
	data, err := readCapped(arg, scenario.MaxFileBytes, "a scenario")
	origin, dir := arg, filepath.Dir(arg)
	if err != nil {
		b, ok := scenarios.Lookup(arg)
		if !ok || strings.ContainsRune(arg, filepath.Separator) || !errors.Is(err, os.ErrNotExist) {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("scenario %q: no such file, and no built-in scenario of that name (built in: %s)", arg, strings.Join(scenarios.Names(), ", "))
			}
			return nil, fmt.Errorf("scenario: %w", err)
		}
		data, origin = b, strings.TrimSuffix(arg, ".toml")+".toml"
		dir = ""
	}
	return scenario.ParseWith(origin, data, modelLoader(dir))
}

// modelLoader resolves a workload's model: a model built into m2n by name,
// else a config.json path, relative to dir (the scenario file's directory;
// "" for the working directory).
func modelLoader(dir string) scenario.ModelLoader {
	return func(name string) (string, []byte, error) {
		if b, ok := scenarios.Model(name); ok {
			return name + ".json", b, nil
		}
		path := name
		if dir != "" && !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		b, err := readCapped(path, maxConfigBytes, "a model's config")
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", nil, fmt.Errorf("no such config file %s, and no built-in model of that name (built in: %s)", path, strings.Join(scenarios.ModelNames(), ", "))
			}
			return "", nil, err
		}
		return path, b, nil
	}
}

// printJSON writes v to w as indented JSON: the --json output of every
// command.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func oneScenarioArg(pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", nil
	case 1:
		return pos[0], nil
	}
	return "", usagef("want one scenario, got %d arguments: %s", len(pos), strings.Join(pos, " "))
}

// encodeFileAtomic writes what encode writes to path as atomicfile.Write
// does ("-" is stdout); errors name the flag that chose the path.
func encodeFileAtomic(stdout io.Writer, flag, path string, encode func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := encode(&buf); err != nil {
		return err
	}
	if err := atomicfile.Write(path, buf.Bytes(), stdout); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

// version is set by the build (-ldflags "-X main.version=...").
var version = "dev"

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "[--json]", "Print the version of m2n.")
	asJSON := fs.Bool("json", false, `print {"version": VERSION} on stdout`)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version takes no arguments, got %s", strings.Join(pos, " "))
	}
	if *asJSON {
		return printJSON(e.stdout, struct {
			Version string `json:"version"`
		}{version})
	}
	fmt.Fprintf(e.stdout, "m2n %s\n", version)
	return nil
}
