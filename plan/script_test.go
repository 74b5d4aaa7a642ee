package plan

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/internal/datadriven"
	"github.com/m2n-project/m2n/ir"
)

// The scripts in testdata/ hold regions and routes as data: layouts and a
// topology in, the needs of every destination rank or the ops of a route
// out. `go test ./plan -run Script -rewrite` rewrites them.
func TestScript(t *testing.T) {
	for _, file := range []string{"testdata/regions.txt", "testdata/routes.txt"} {
		datadriven.RunFile(t, file, func(t *testing.T, c *datadriven.Case) string {
			var out datadriven.Lines
			tensors, tp, err := datadriven.Tensors(c)
			if err != nil {
				out.Printf("error: %v", err)
				return out.String()
			}
			switch c.Cmd {
			case "regions":
				for _, tn := range tensors {
					r, err := Derive(tn.Src, tn.Dst)
					if err != nil {
						out.Printf("error: %v", err)
						continue
					}
					printRegions(&out, r)
				}
			case "route":
				chunk, err := strconv.ParseInt(c.Arg("chunk", "0"), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				s, err := Build(tensors, tp, Options{Route: c.Arg("name", ""), ChunkBytes: chunk})
				if err != nil {
					out.Printf("error: %v", err)
					break
				}
				printSchedule(&out, s)
			default:
				t.Fatalf("unknown command %q", c.Cmd)
			}
			return out.String()
		})
	}
}

func printRegions(out *datadriven.Lines, r *Regions) {
	for k, sl := range r.SrcSlots {
		out.Printf("src slot %d %v held by %v", k, sl.Box, sl.Ranks)
	}
	for k, sl := range r.DstSlots {
		out.Printf("dst slot %d %v needed by %v", k, sl.Box, sl.Ranks)
	}
	for _, d := range r.Dst.Mesh.Ranks {
		needs := r.Needs(d)
		if len(needs) == 0 {
			out.Printf("rank %d needs nothing", d)
		}
		for _, n := range needs {
			from := fmt.Sprintf("from %d", n.Supplier)
			if n.Local {
				from = "local copy"
			}
			out.Printf("rank %d needs %v %s", d, n.Box, from)
		}
	}
	st := r.Stats()
	out.Printf("unique %d B, %d contributions, %d transfers (%d B), %d local copies (%d B), src egress %d..%d B",
		st.UniqueBytes, st.Contributions, st.Transfers, st.TransferBytes, st.LocalCopies, st.LocalBytes, st.EgressMin, st.EgressMax)
}

var opNames = map[ir.OpKind]string{ir.Send: "send", ir.Recv: "recv", ir.Copy: "copy", ir.Pack: "pack", ir.Unpack: "unpack"}

func printSchedule(out *datadriven.Lines, s *ir.Schedule) {
	for i := range s.Ops {
		op := &s.Ops[i]
		var b strings.Builder
		fmt.Fprintf(&b, "%d %s r%d", i, opNames[op.Kind], op.Rank)
		switch op.Kind {
		case ir.Send:
			fmt.Fprintf(&b, "->r%d %s", op.Peer, region(s, op.Src))
		case ir.Recv:
			fmt.Fprintf(&b, "<-r%d %s", op.Peer, region(s, op.Dst))
		default:
			fmt.Fprintf(&b, " %s -> %s", region(s, op.Src), region(s, op.Dst))
		}
		if deps := s.Deps(int32(i)); len(deps) > 0 {
			fmt.Fprintf(&b, " after %v", deps)
		}
		out.Printf("%s", b.String())
	}
	st := s.Stats()
	out.Printf("%d ops, %d transfers; bytes network %d, NVLink %d, local %d; max staging %d B",
		st.Ops, st.Transfers, st.Bytes[ir.Net], st.Bytes[ir.NVLink], st.Bytes[ir.Local], st.MaxStaging)
}

// region writes a region as buffer:bytes, or buffer:box.
func region(s *ir.Schedule, r ir.Region) string {
	b := &s.Buffers[r.Buf]
	name := fmt.Sprintf("%s%d", [...]string{"?", "in", "out", "stg"}[b.Kind], r.Buf)
	if r.IsBox() {
		return fmt.Sprintf("%s%v", name, s.Box(r))
	}
	return fmt.Sprintf("%s[%d+%d]", name, r.Offset, r.Bytes)
}
