package reports

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
)

// Recommendation is, for one situation (a point's coordinates but those
// of the sweeps that are choices: the staging cap and the chunk), the
// fastest evaluated choice (route and choice sweeps) that fits in the
// GPUs' memory, and why each other choice loses.
type Recommendation struct {
	Situation string    `json:"situation"` // the coordinates that are not choices; "-": none
	Best      *Verdict  `json:"best,omitempty"`
	Others    []Verdict `json:"others"`
}

// Verdict is one choice in a situation: its time and memory, or why it
// cannot be taken.
type Verdict struct {
	Choice    string  `json:"choice"` // the route and the choice sweeps' values
	Seconds   float64 `json:"seconds,omitempty"`
	Memory    int64   `json:"memory_per_gpu_bytes,omitempty"`
	Why       string  `json:"why"`
	fits      bool
	evaluated bool
}

// ChoiceSweeps are the sweeps whose every key is a choice the planner
// makes (staging_cap, chunk), by name.
func ChoiceSweeps(sweeps []scenario.Sweep) map[string]bool {
	out := map[string]bool{}
	for _, sw := range sweeps {
		choice := len(sw.Keys) > 0
		for _, k := range sw.Keys {
			choice = choice && (k == "staging_cap" || k == "chunk")
		}
		if choice {
			out[sw.Name] = true
		}
	}
	return out
}

// split names a point's situation and its choice.
func split(p *scenario.Point, choices map[string]bool) (situation, choice string) {
	if p == nil {
		return "-", ""
	}
	var sit, ch []string
	for _, q := range p.Params {
		kv := q.Name + "=" + scenario.FormatValue(q.Value)
		if choices[q.Name] {
			ch = append(ch, kv)
		} else {
			sit = append(sit, kv)
		}
	}
	if len(sit) == 0 {
		return "-", strings.Join(ch, ", ")
	}
	return strings.Join(sit, ", "), strings.Join(ch, ", ")
}

// Recommend picks, per situation, the fastest choice that fits: by the
// time with the framework's costs where the scenario gives them, else the
// modeled time. A choice whose memory per GPU is over the GPU's does not
// fit; where the topology does not know its GPUs' memory, every choice is
// taken to fit and the verdict says so.
func Recommend(rows []Row, skips []evaluate.Skip, choices map[string]bool) []Recommendation {
	var order []string
	by := map[string][]Verdict{}
	add := func(sit string, v Verdict) {
		if _, ok := by[sit]; !ok {
			order = append(order, sit)
		}
		by[sit] = append(by[sit], v)
	}
	for i := range rows {
		r := &rows[i]
		sit, ch := split(r.Point, choices)
		t := r.Modeled
		if r.Framework != nil {
			t += r.Framework.Export + r.Framework.Load
		}
		v := Verdict{Choice: strings.TrimSuffix(r.Route+", "+ch, ", "), Seconds: t.Seconds(), Memory: r.Memory.TotalBytes, evaluated: true}
		switch {
		case !r.Memory.CapacityKnown:
			v.fits, v.Why = true, "memory not checked: the topology does not give its GPUs' memory"
		case r.Memory.Fits:
			v.fits = true
		default:
			v.Why = fmt.Sprintf("does not fit: %s per GPU, more than the GPU's %s", units.Bytes(r.Memory.TotalBytes).Human(), units.Bytes(r.Memory.CapacityBytes).Human())
		}
		add(sit, v)
	}
	for _, k := range skips {
		sit, ch := split(k.Point, choices)
		add(sit, Verdict{Choice: strings.TrimSuffix(k.Route+", "+ch, ", "), Why: "cannot run: " + k.Reason})
	}
	var out []Recommendation
	for _, sit := range order {
		vs := by[sit]
		best := -1
		for i, v := range vs {
			if v.fits && (best < 0 || v.Seconds < vs[best].Seconds) {
				best = i
			}
		}
		rec := Recommendation{Situation: sit, Others: []Verdict{}}
		if best >= 0 {
			b := vs[best]
			rec.Best = &b
		}
		for i, v := range vs {
			if i == best {
				continue
			}
			if v.fits && best >= 0 {
				v.Why = strings.TrimPrefix(fmt.Sprintf("%s; slower: %+.1f%% over the best", v.Why, 100*(v.Seconds/vs[best].Seconds-1)), "; ")
			}
			rec.Others = append(rec.Others, v)
		}
		// The others: the evaluated ones fastest first, then those that could not run.
		slices.SortStableFunc(rec.Others, func(a, b Verdict) int {
			switch {
			case a.evaluated != b.evaluated:
				if a.evaluated {
					return -1
				}
				return 1
			case a.Seconds < b.Seconds:
				return -1
			case a.Seconds > b.Seconds:
				return 1
			}
			return 0
		})
		out = append(out, rec)
	}
	return out
}

// WriteRecommendations writes the recommendations as text.
func WriteRecommendations(w io.Writer, recs []Recommendation) {
	fmt.Fprintf(w, "\nrecommendation: per point, the fastest route (and staging cap or chunk, where swept) that fits in the GPUs' memory\n")
	for _, r := range recs {
		if r.Best == nil {
			fmt.Fprintf(w, "%s: nothing fits\n", r.Situation)
		} else {
			fmt.Fprintf(w, "%s: %s: %s, %s per GPU", r.Situation, r.Best.Choice, units.Time(r.Best.Seconds*float64(units.Second)+0.5), units.Bytes(r.Best.Memory).Human())
			if r.Best.Why != "" {
				fmt.Fprintf(w, " (%s)", r.Best.Why)
			}
			fmt.Fprintln(w)
		}
		for _, o := range r.Others {
			if o.evaluated {
				fmt.Fprintf(w, "  %s: %s, %s per GPU: %s\n", o.Choice, units.Time(o.Seconds*float64(units.Second)+0.5), units.Bytes(o.Memory).Human(), o.Why)
			} else {
				fmt.Fprintf(w, "  %s: %s\n", o.Choice, o.Why)
			}
		}
	}
}
