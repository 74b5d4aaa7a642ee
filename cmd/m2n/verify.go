package main

import (
	"context"
	"fmt"
	"os"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/reports"
)

type verifyOutput struct {
	File         string             `json:"file"`
	Route        string             `json:"route"`
	Ops          int                `json:"ops"`
	Transfers    int                `json:"transfers"`
	Bytes        reports.ClassBytes `json:"bytes"`
	Verified     bool               `json:"verified"`
	Executed     bool               `json:"executed"`
	CheckedBytes int64              `json:"checked_bytes"`
	WrongBytes   int64              `json:"wrong_bytes"`
}

func runVerify(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "verify", "[flags] IR.json",
		`Read a schedule IR file (as m2n plan --ir writes it, or from any other tool),
check that it is well formed and moves exactly the right bytes, and with
--exec run it on the host reference executor, checking every destination byte.`)
	asJSON := fs.Bool("json", false, "print JSON on stdout (fields in docs/cli.md)")
	exec := fs.Bool("exec", false, "also run it on the host reference executor")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("verify: want one IR file, got %d arguments", len(pos))
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := ir.Decode(f)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	st := s.Stats()
	out := verifyOutput{File: pos[0], Route: s.Route, Ops: st.Ops, Transfers: st.Transfers, Bytes: reports.ByClass(st.Bytes), Verified: true}
	if *exec {
		res, err := hostexec.Run(s, hostexec.Options{Seed: 1})
		if err != nil {
			return fmt.Errorf("%s: %w", pos[0], err)
		}
		out.Executed, out.CheckedBytes, out.WrongBytes = true, res.Bytes, res.Wrong
		if res.Wrong > 0 {
			fmt.Fprintf(e.stderr, "m2n: %s: first wrong byte: %s\n", pos[0], res.FirstWrong)
		}
	}
	if *asJSON {
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "%s: route %s, %d ops, %d transfers; network %s, NVLink %s, local %s; verified\n",
			pos[0], s.Route, st.Ops, st.Transfers, units.Bytes(st.Bytes[ir.Net]).Human(), units.Bytes(st.Bytes[ir.NVLink]).Human(), units.Bytes(st.Bytes[ir.Local]).Human())
		if out.Executed {
			fmt.Fprintf(e.stdout, "host execution: %s checked, %d wrong\n", units.Bytes(out.CheckedBytes).Human(), out.WrongBytes)
		}
	}
	if out.WrongBytes > 0 {
		return checkFailed{fmt.Sprintf("%s: %d wrong bytes", pos[0], out.WrongBytes)}
	}
	return nil
}
