package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/units"
)

// WriteTrace writes the timeline of a simulation (run with
// Options.Timeline) as Chrome trace-event JSON, which the Perfetto UI and
// chrome://tracing open. Each GPU is a process; each of its resources is a
// set of tracks (as many as the flows it carried at once); each flow is a
// slice on every resource it used. Times are in microseconds.
func WriteTrace(w io.Writer, s *ir.Schedule, r *Result) error {
	if r.Ops == nil {
		return fmt.Errorf("sim: no timeline recorded (run with Options.Timeline)")
	}
	if r.Modeled != nil {
		s = r.Modeled
	}
	bw := bufio.NewWriter(w)
	first := true
	emit := func(v any) {
		if !first {
			bw.WriteString(",\n")
		}
		first = false
		b, _ := json.Marshal(v)
		bw.Write(b)
	}
	bw.WriteString(`{"displayTimeUnit":"ns","traceEvents":[` + "\n")
	type meta struct {
		Ph   string            `json:"ph"`
		Name string            `json:"name"`
		Pid  int               `json:"pid"`
		Tid  int               `json:"tid"`
		Args map[string]string `json:"args"`
	}
	type slice struct {
		Ph   string         `json:"ph"`
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Args map[string]any `json:"args"`
	}
	pidOf := func(res int32) int {
		if g := r.Resources[res].GPU; g >= 0 {
			return g
		}
		return 1_000_000 + r.Resources[res].Domain
	}
	named := map[int]bool{}
	for i, rs := range r.Resources {
		pid := pidOf(int32(i))
		if !named[pid] {
			named[pid] = true
			label := fmt.Sprintf("gpu %d (domain %d)", rs.GPU, rs.Domain)
			if rs.GPU < 0 {
				label = fmt.Sprintf("domain %d fabric", rs.Domain)
			}
			emit(meta{"M", "process_name", pid, 0, map[string]string{"name": label}})
		}
	}
	// Lay each resource's flows out on tracks with no overlap, greedily by
	// start time: track k of resource i is tid i*1000 + k.
	type iv struct {
		flow       int
		start, end units.Time
	}
	per := make([][]iv, len(r.Resources))
	for f, res := range r.FlowRes {
		a := r.FlowOps[f][0]
		span := r.Ops[a]
		for _, x := range res {
			per[x] = append(per[x], iv{f, span.Start, span.End})
		}
	}
	us := func(t units.Time) float64 { return float64(t) / float64(units.Microsecond) }
	for i, ivs := range per {
		sort.SliceStable(ivs, func(a, b int) bool { return ivs[a].start < ivs[b].start })
		var ends []units.Time
		for _, v := range ivs {
			k := 0
			for k < len(ends) && ends[k] > v.start {
				k++
			}
			if k == len(ends) {
				ends = append(ends, 0)
				emit(meta{"M", "thread_name", pidOf(int32(i)), i*1000 + k, map[string]string{"name": r.Resources[i].Class + " " + strconv.Itoa(k)}})
			}
			ends[k] = v.end
			ops := r.FlowOps[v.flow]
			op := &s.Ops[ops[0]]
			name := fmt.Sprintf("%s %s", op.Kind, units.Bytes(op.Src.Bytes).Human())
			args := map[string]any{"op": ops[0], "rank": op.Rank, "bytes": op.Src.Bytes}
			if ops[1] >= 0 {
				name = fmt.Sprintf("%d -> %d %s", op.Rank, op.Peer, units.Bytes(op.Src.Bytes).Human())
				args["recv_op"] = ops[1]
				args["peer"] = op.Peer
			}
			emit(slice{"X", name, r.Resources[i].Class, pidOf(int32(i)), i*1000 + k, us(v.start), us(v.end - v.start), args})
		}
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}

// FlowsFormat and FlowsVersion identify the flows JSON.
const (
	FlowsFormat  = "m2n.flows"
	FlowsVersion = 1
)

type flowsJSON struct {
	Format    string         `json:"format"`
	Version   int            `json:"version"`
	Resources []resourceJSON `json:"resources"`
	Flows     []flowJSON     `json:"flows"`
}

type resourceJSON struct {
	ID       int     `json:"id"`
	Name     string  `json:"name"`
	Class    string  `json:"class"`
	GPU      int     `json:"gpu"`
	Domain   int     `json:"domain"`
	Capacity float64 `json:"capacity_bytes_per_s"`
}

type flowJSON struct {
	ID        int       `json:"id"`
	Bytes     int64     `json:"bytes"`
	Resources []int32   `json:"resources"`
	Coef      []float64 `json:"coefficients"`
	LatencyPS int64     `json:"start_latency_ps"`
	ReleasePS int64     `json:"release_ps,omitempty"`
	Deps      []int32   `json:"deps"`
	Ops       []int32   `json:"ops"`
}

// WriteFlows writes the flows a simulation ran, with their resources and
// dependencies, as JSON (docs/sim.md), so another simulator can replay the
// same work.
func WriteFlows(w io.Writer, s *ir.Schedule, r *Result) error {
	out := flowsJSON{Format: FlowsFormat, Version: FlowsVersion, Resources: []resourceJSON{}, Flows: []flowJSON{}}
	for i, rs := range r.Resources {
		out.Resources = append(out.Resources, resourceJSON{i, rs.Name, rs.Class, rs.GPU, rs.Domain, float64(rs.Capacity)})
	}
	if r.Modeled != nil {
		s = r.Modeled
	}
	for f := range r.FlowRes {
		ops := r.FlowOps[f]
		fj := flowJSON{ID: f, Bytes: s.Ops[ops[0]].Src.Bytes, Resources: r.FlowRes[f], Coef: r.FlowCoef[f], LatencyPS: int64(r.FlowLat[f]), Deps: []int32{}, Ops: []int32{ops[0]}}
		if ops[1] >= 0 {
			fj.Ops = append(fj.Ops, ops[1])
		}
		if r.FlowRel != nil {
			fj.ReleasePS = int64(r.FlowRel[f])
		}
		seen := map[int32]bool{int32(f): true}
		for _, o := range fj.Ops {
			for _, d := range s.Deps(o) {
				if df := r.FlowOf[d]; !seen[df] {
					seen[df] = true
					fj.Deps = append(fj.Deps, df)
				}
			}
		}
		sort.Slice(fj.Deps, func(a, b int) bool { return fj.Deps[a] < fj.Deps[b] })
		out.Flows = append(out.Flows, fj)
	}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}
