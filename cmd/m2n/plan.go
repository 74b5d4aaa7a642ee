package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
)

// planRegionRecord is one line of `m2n plan --json` for a tensor at a sweep
// point. docs/cli.md documents every field.
type planRegionRecord struct {
	Point          map[string]any `json:"point"`
	Tensor         string         `json:"tensor"`
	Src            string         `json:"src"`
	Dst            string         `json:"dst"`
	UniqueBytes    int64          `json:"unique_bytes"`
	NeedBytesMin   int64          `json:"need_bytes_min"`
	NeedBytesMax   int64          `json:"need_bytes_max"`
	Regions        int            `json:"regions"`
	Transfers      int            `json:"transfers"`
	LocalCopies    int            `json:"local_copies"`
	TransferBytes  int64          `json:"transfer_bytes"`
	LocalBytes     int64          `json:"local_bytes"`
	EgressBytesMin int64          `json:"src_egress_bytes_min"`
	EgressBytesMax int64          `json:"src_egress_bytes_max"`
	Digest         string         `json:"digest"`
}

type planOutput struct {
	Scenario string             `json:"scenario"`
	Tensors  []planRegionRecord `json:"tensors"`
}

func runPlan(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "plan", "[flags] [SCENARIO]",
		`Derive, for every tensor and sweep point of the scenario, the exact regions
each destination rank needs and which source rank supplies each, and print a
summary: unique bytes, bytes needed per destination rank, region count,
source egress per rank.`)
	asJSON := fs.Bool("json", false, "print JSON records on stdout (fields in docs/cli.md)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	arg, err := oneScenarioArg(pos)
	if err != nil {
		return err
	}
	sc, err := loadScenario(arg)
	if err != nil {
		return err
	}
	points, err := sc.Points()
	if err != nil {
		return err
	}
	out := planOutput{Scenario: sc.Name, Tensors: []planRegionRecord{}}
	for _, p := range points {
		for _, t := range p.Tensors {
			if err := ctx.Err(); err != nil {
				return err
			}
			r, err := plan.Derive(t.Src, t.Dst)
			if err != nil {
				return fmt.Errorf("point %s, tensor %s: %w", p.Label(), t.Name, err)
			}
			st := r.Stats()
			d := r.Digest()
			out.Tensors = append(out.Tensors, planRegionRecord{
				Point: p.Map(), Tensor: t.Name, Src: t.Src.String(), Dst: t.Dst.String(),
				UniqueBytes: st.UniqueBytes, NeedBytesMin: st.NeedMin, NeedBytesMax: st.NeedMax,
				Regions: st.Contributions, Transfers: st.Transfers, LocalCopies: st.LocalCopies,
				TransferBytes: st.TransferBytes, LocalBytes: st.LocalBytes,
				EgressBytesMin: st.EgressMin, EgressBytesMax: st.EgressMax,
				Digest: hex.EncodeToString(d[:]),
			})
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(e.stdout, "scenario %s: %s\n\n", sc.Name, sc.Description)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\ttensor\tunique\tneed/dst rank\tregions\ttransfers\tlocal\tegress/src rank\tdigest")
	for i, rec := range out.Tensors {
		p := points[i/len(points[0].Tensors)]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n",
			p.Label(), rec.Tensor, units.Bytes(rec.UniqueBytes).Human(),
			span(rec.NeedBytesMin, rec.NeedBytesMax), rec.Regions, rec.Transfers, rec.LocalCopies,
			span(rec.EgressBytesMin, rec.EgressBytesMax), rec.Digest[:12])
	}
	return tw.Flush()
}

// span writes a min..max byte range, or one value when they are equal.
func span(lo, hi int64) string {
	if lo == hi {
		return units.Bytes(lo).Human()
	}
	return units.Bytes(lo).Human() + " .. " + units.Bytes(hi).Human()
}
