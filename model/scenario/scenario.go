// Package scenario reads m2n scenarios: TOML documents naming a topology,
// tensors with their source and destination layouts, the routes to compare,
// sweeps over any key, and reference measurements.
//
// Reading is strict: an unknown key is an error that names its path and
// line; every value is checked and an error names the field and the value.
// The package never touches the file system: callers pass the bytes.
package scenario

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/model/workload"
)

// Scenario is a parsed, validated scenario document.
type Scenario struct {
	Name        string
	Description string
	Sweeps      []Sweep
	References  []Reference

	source string // the document, decoded afresh for each sweep point
	origin string // file name, for messages
	models models // the workload's model configs
}

// Sweep is one swept axis.
type Sweep struct {
	Name   string // axis name, as in records' "point"
	Label  string // the axis's title in charts ("" : Name)
	Keys   []string
	Values []any // the axis values naming each point (int64, float64, string, or []any)
}

// Reference is a measured time for one route at one point.
type Reference struct {
	Route    string
	Point    map[string]any
	Measured units.Time
	Source   string
	Note     string
}

// Param is one coordinate of a sweep point.
type Param struct {
	Name  string
	Value any
}

// Point is the scenario resolved at one sweep point: everything needed to
// plan and simulate.
type Point struct {
	Index    int
	Params   []Param // one per sweep, in sweep order; empty without sweeps
	Topology *topo.Topology
	Tensors  []Tensor
	Routes   []string     // empty means every route
	Chunk    *units.Bytes // nil means the planner's default
	// StagingCap bounds each GPU's staging memory; nil (or 0): no cap.
	StagingCap *units.Bytes
	// Framework is the frameworks' costs around the transfer
	// ([workload.framework]); nil: none given.
	Framework *FrameworkCosts
}

// FrameworkCosts are what the trainer pays to export its weights and the
// generator to load them, per tensor and per GiB (2^30 bytes) of a rank's
// share, as a user measured them; each is 0 unless given. Ranks export and
// load in parallel, the export before the transfer and the load after it:
// the time they add is the busiest trainer rank's export plus the busiest
// generator rank's load.
type FrameworkCosts struct {
	ExportPerTensor, ExportPerGiB units.Time
	LoadPerTensor, LoadPerGiB     units.Time
}

// Tensor is one tensor to move, with both layouts resolved to global ranks.
type Tensor struct {
	Name     string
	Src, Dst layout.Layout
	Quant    layout.Quant // a quantized destination (Dst.DType fp8_e4m3)
	// Class groups a workload's tensors for byte breakdowns ("experts",
	// "attention", ...; "bucket" for a bucket of replicated weights, whose
	// Members say what it holds); empty for a [[tensors]] entry.
	Class   string
	Members []workload.Member
}

// Label writes the point as "rho=2, nic=50 GB/s", or "-" without sweeps.
func (p *Point) Label() string {
	if len(p.Params) == 0 {
		return "-"
	}
	parts := make([]string, len(p.Params))
	for i, q := range p.Params {
		parts[i] = q.Name + "=" + FormatValue(q.Value)
	}
	return strings.Join(parts, ", ")
}

// Map returns the point's coordinates by name, for JSON records.
func (p *Point) Map() map[string]any {
	m := make(map[string]any, len(p.Params))
	for _, q := range p.Params {
		m[q.Name] = q.Value
	}
	return m
}

// FormatValue writes a sweep value compactly.
func FormatValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = FormatValue(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}

// Parse reads a scenario document. origin names it in errors (a file name).
// A scenario with a [workload] needs [ParseWith] and a loader for its model.
func Parse(origin string, data []byte) (*Scenario, error) {
	return ParseWith(origin, data, nil)
}

// ParseWith reads a scenario document, loading the config.json of a
// [workload]'s model through load.
func ParseWith(origin string, data []byte, load ModelLoader) (*Scenario, error) {
	if err := checkShape(origin, string(data)); err != nil {
		return nil, err
	}
	s := &Scenario{source: string(data), origin: origin, models: models{load: load}}
	f, md, err := s.decode()
	if err != nil {
		return nil, err
	}
	s.Name, s.Description = f.Name, f.Description
	if s.Name == "" {
		return nil, s.errorf("name: missing; give the scenario a name")
	}
	if err := checkRoutes(f.Routes); err != nil {
		line := locateKeys(s.source).find(toml.Key{"routes"})
		return nil, fmt.Errorf("%s:%d: %w", s.origin, line, err)
	}
	if err := s.readSweeps(f, md); err != nil {
		return nil, err
	}
	if n := s.NumPoints(); n > MaxPoints {
		return nil, s.errorf("sweep: more than %d points; split the scenario", MaxPoints)
	}
	if err := s.readReferences(f); err != nil {
		return nil, err
	}
	// Resolve every point now, so a bad value anywhere fails at load time.
	if _, err := s.Points(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Scenario) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{s.origin}, args...)...)
}

func (s *Scenario) decode() (*File, toml.MetaData, error) {
	var f File
	md, err := toml.Decode(s.source, &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			if pe.LastKey != "" {
				return nil, md, fmt.Errorf("%s:%d: %s: %s", s.origin, pe.Position.Line, pe.LastKey, pe.Message)
			}
			return nil, md, fmt.Errorf("%s:%d: %s", s.origin, pe.Position.Line, pe.Message)
		}
		return nil, md, s.errorf("%v", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		var errs []error
		lines := locateKeys(s.source)
		for _, k := range und {
			path := k.String()
			if ln := lines.find(k); ln > 0 {
				errs = append(errs, fmt.Errorf("%s:%d: unknown key %q", s.origin, ln, path))
			} else {
				errs = append(errs, fmt.Errorf("%s: unknown key %q", s.origin, path))
			}
		}
		return nil, md, errors.Join(errs...)
	}
	return &f, md, nil
}

func (s *Scenario) readSweeps(f *File, md toml.MetaData) error {
	names := map[string]bool{}
	for i, sw := range f.Sweeps {
		at := fmt.Sprintf("sweep[%d]", i)
		var keys []string
		switch {
		case sw.Key != "" && len(sw.Set) > 0:
			return s.errorf("%s: give either key or set, not both", at)
		case sw.Key != "":
			keys = []string{sw.Key}
		case len(sw.Set) > 0:
			for k := range sw.Set {
				keys = append(keys, k)
			}
			sort.Strings(keys)
		default:
			return s.errorf("%s: give key (the key to sweep) or set (keys swept together)", at)
		}
		if len(sw.Values) == 0 {
			return s.errorf("%s.values: empty; list the values to sweep", at)
		}
		for _, k := range keys {
			if sw.Key == "" && len(sw.Set[k]) != len(sw.Values) {
				return s.errorf("%s.set.%q has %d values but values has %d", at, k, len(sw.Set[k]), len(sw.Values))
			}
			if strings.HasPrefix(k, "sweep") || strings.HasPrefix(k, "reference") || k == "name" || k == "description" {
				return s.errorf("%s: key %q cannot be swept", at, k)
			}
		}
		name := sw.Name
		if name == "" {
			if sw.Key == "" {
				return s.errorf("%s.name: missing; a sweep with set needs a name", at)
			}
			name = sw.Key
		}
		if names[name] {
			return s.errorf("%s.name: %q used by two sweeps", at, name)
		}
		names[name] = true
		vals := make([]any, len(sw.Values))
		for j, p := range sw.Values {
			if err := md.PrimitiveDecode(p, &vals[j]); err != nil {
				return s.errorf("%s.values[%d]: %v", at, j, err)
			}
		}
		s.Sweeps = append(s.Sweeps, Sweep{Name: name, Label: sw.Label, Keys: keys, Values: vals})
	}
	return nil
}

func (s *Scenario) readReferences(f *File) error {
	for i, r := range f.References {
		at := fmt.Sprintf("reference[%d]", i)
		if r.Route == "" {
			return s.errorf("%s.route: missing", at)
		}
		if !(r.TimeMS > 0) {
			return s.errorf("%s.time_ms = %v: must be positive", at, r.TimeMS)
		}
		for _, k := range sortedKeys(r.Point) {
			found := false
			for _, sw := range s.Sweeps {
				if sw.Name != k {
					continue
				}
				found = true
				ok := false
				for _, v := range sw.Values {
					ok = ok || ValueEqual(v, r.Point[k])
				}
				if !ok {
					return s.errorf("%s.point.%s = %v: no sweep point has this value", at, k, FormatValue(r.Point[k]))
				}
			}
			if !found {
				return s.errorf("%s.point.%s: no sweep is named %q", at, k, k)
			}
		}
		s.References = append(s.References, Reference{
			Route: r.Route, Point: r.Point, Source: r.Source, Note: r.Note,
			Measured: units.Time(r.TimeMS * float64(units.Millisecond)),
		})
	}
	return nil
}

// Matches reports whether a reference applies at point p: every coordinate
// the reference names equals p's.
func (r Reference) Matches(p *Point) bool {
	m := p.Map()
	for k, v := range r.Point {
		if !ValueEqual(m[k], v) {
			return false
		}
	}
	return true
}

// ValueEqual compares sweep values, numbers by value across int and float.
func ValueEqual(a, b any) bool {
	fa, aNum := toFloat(a)
	fb, bNum := toFloat(b)
	if aNum && bNum {
		return fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// MaxPoints bounds the number of sweep points of one scenario.
const MaxPoints = 100_000

// NumPoints is the number of sweep points (1 without sweeps).
func (s *Scenario) NumPoints() int {
	n := 1
	for _, sw := range s.Sweeps {
		n *= len(sw.Values)
		if n > MaxPoints {
			return n
		}
	}
	return n
}

// Points resolves every sweep point, in order: the last sweep varies
// fastest.
func (s *Scenario) Points() ([]*Point, error) {
	n := s.NumPoints()
	out := make([]*Point, 0, n)
	for i := range n {
		p, err := s.Point(i)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Point resolves sweep point i.
func (s *Scenario) Point(i int) (*Point, error) {
	f, md, err := s.decode()
	if err != nil {
		return nil, err
	}
	idx := make([]int, len(s.Sweeps))
	v := i
	for k := len(s.Sweeps) - 1; k >= 0; k-- {
		idx[k] = v % len(s.Sweeps[k].Values)
		v /= len(s.Sweeps[k].Values)
	}
	p := &Point{Index: i}
	for k, sw := range s.Sweeps {
		spec := f.Sweeps[k]
		j := idx[k]
		p.Params = append(p.Params, Param{Name: sw.Name, Value: sw.Values[j]})
		for _, key := range sw.Keys {
			prim := spec.Values[j]
			if spec.Key == "" {
				prim = spec.Set[key][j]
			}
			if err := setPath(f, key, md, prim); err != nil {
				return nil, s.errorf("sweep %q at %s: %w", sw.Name, FormatValue(sw.Values[j]), err)
			}
		}
	}
	if err := s.resolve(f, p); err != nil {
		if len(p.Params) > 0 {
			return nil, s.errorf("at %s: %w", p.Label(), err)
		}
		return nil, s.errorf("%w", err)
	}
	return p, nil
}

// RouteNames are the routes a scenario may name, as plan.Routes lists them
// (a test of package plan keeps the two equal).
var RouteNames = []string{"flat", "agbcast", "hierarchical", "nemo-legacy"}

// checkRoutes checks a scenario's routes against RouteNames.
func checkRoutes(routes []string) error {
	for i, r := range routes {
		if !slices.Contains(RouteNames, r) {
			return fmt.Errorf("routes[%d] = %q: unknown route (known: %s)", i, r, strings.Join(RouteNames, ", "))
		}
	}
	return nil
}

func (s *Scenario) resolve(f *File, p *Point) error {
	if err := checkRoutes(f.Routes); err != nil {
		return err
	}
	p.Routes = f.Routes
	if f.Chunk != nil {
		if *f.Chunk <= 0 {
			return fmt.Errorf("chunk = %v: must be positive", units.Bytes(*f.Chunk))
		}
		c := units.Bytes(*f.Chunk)
		p.Chunk = &c
	}
	if f.StagingCap != nil {
		if *f.StagingCap < 0 {
			return fmt.Errorf("staging_cap = %v: must not be negative (\"0 B\": no cap)", units.Bytes(*f.StagingCap))
		}
		c := units.Bytes(*f.StagingCap)
		p.StagingCap = &c
	}
	meshes := map[string]layout.Mesh{}
	for _, name := range sortedKeys(f.Meshes) {
		m, err := meshFrom(f.Meshes[name].Shape, f.Meshes[name].Ranks, f.Meshes[name].FirstRank)
		if err != nil {
			return fmt.Errorf("meshes.%s: %w", name, err)
		}
		meshes[name] = m
	}
	if len(f.Tensors) == 0 && f.Workload == nil {
		return errors.New("tensors: none given; add a [[tensors]] table or a [workload]")
	}
	var ranks []int
	for i, ts := range f.Tensors {
		at := fmt.Sprintf("tensors[%d]", i)
		if ts.Name != "" {
			at += " (" + ts.Name + ")"
		}
		dt, err := layout.ParseDType(ts.DType)
		if err != nil {
			return fmt.Errorf("%s.dtype: %w", at, err)
		}
		t := Tensor{Name: ts.Name}
		if t.Name == "" {
			t.Name = fmt.Sprintf("tensor%d", i)
		}
		for _, side := range []struct {
			name string
			spec LayoutSpec
			out  *layout.Layout
		}{{"src", ts.Src, &t.Src}, {"dst", ts.Dst, &t.Dst}} {
			l, err := layoutFrom(ts.Shape, dt, side.spec, meshes)
			if err == nil {
				err = l.Validate()
			}
			if err != nil {
				return fmt.Errorf("%s.%s: %w", at, side.name, err)
			}
			*side.out = l
		}
		dd, q, err := ts.QuantSpec.resolve(dt)
		if err != nil {
			return fmt.Errorf("%s.%w", at, err)
		}
		if q.On() {
			if q, err = q.ForLayout(t.Dst); err != nil {
				return fmt.Errorf("%s.scales = %q: %w", at, ts.Scales, err)
			}
			t.Dst.DType, t.Quant = dd, q
			if err := layout.ValidateQuant(dt, dd, t.Src.Shape, q); err != nil {
				return fmt.Errorf("%s.dst_dtype = %q: %w", at, *ts.DstDType, err)
			}
			if _, err := layout.LandingLayout(t.Dst, q); err != nil {
				return fmt.Errorf("%s.dst: %w", at, err)
			}
		}
		ranks = append(ranks, t.Src.Mesh.Ranks...)
		ranks = append(ranks, t.Dst.Mesh.Ranks...)
		p.Tensors = append(p.Tensors, t)
	}
	if f.Workload != nil {
		ts, wranks, err := s.workload(f.Workload)
		if err != nil {
			return fmt.Errorf("workload.%w", err)
		}
		p.Tensors = append(p.Tensors, ts...)
		ranks = append(ranks, wranks...)
		if fw := f.Workload.Framework; fw != nil {
			c := &FrameworkCosts{}
			for _, x := range []struct {
				name string
				v    *units.Time
				dst  *units.Time
			}{{"export_per_tensor", fw.ExportPerTensor, &c.ExportPerTensor}, {"export_per_gib", fw.ExportPerGiB, &c.ExportPerGiB},
				{"load_per_tensor", fw.LoadPerTensor, &c.LoadPerTensor}, {"load_per_gib", fw.LoadPerGiB, &c.LoadPerGiB}} {
				if x.v == nil {
					continue
				}
				if *x.v < 0 {
					return fmt.Errorf("workload.framework.%s = %v: must not be negative", x.name, *x.v)
				}
				*x.dst = *x.v
			}
			p.Framework = c
		}
	}
	tp, err := topologyFrom(f.Topology, ranks)
	if err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	p.Topology = tp
	return nil
}

func meshFrom(shape []int, ranks RankList, first *int) (layout.Mesh, error) {
	m := layout.Mesh{Shape: shape}
	if shape == nil {
		return m, errors.New("shape: missing; give the mesh's axes, e.g. [2, 8]")
	}
	if len(shape) == 0 {
		return m, errors.New("shape = []: a mesh needs at least one axis (one rank is [1])")
	}
	for i, s := range shape {
		if s <= 0 {
			return m, fmt.Errorf("shape[%d] = %d: must be positive", i, s)
		}
	}
	switch {
	case ranks != nil && first != nil:
		return m, errors.New("give ranks or first_rank, not both")
	case ranks != nil:
		m.Ranks = ranks
	case first != nil:
		if *first < 0 {
			return m, fmt.Errorf("first_rank = %d: must not be negative", *first)
		}
		n := m.Size()
		if n > layout.MaxRank || *first > layout.MaxRank-n {
			return m, fmt.Errorf("first_rank = %d with %d ranks runs past rank %d", *first, n, layout.MaxRank)
		}
		m.Ranks = layout.RankRange(*first, n)
	default:
		return m, errors.New("ranks: missing; give ranks (\"0-15\") or first_rank")
	}
	return m, m.Validate()
}

func layoutFrom(shape []int64, dt layout.DType, ls LayoutSpec, meshes map[string]layout.Mesh) (layout.Layout, error) {
	l := layout.Layout{Shape: shape, DType: dt}
	switch {
	case ls.Mesh != "" && (ls.Shape != nil || ls.Ranks != nil || ls.FirstRank != nil):
		return l, fmt.Errorf("mesh = %q: give a mesh name or an inline mesh (shape, ranks), not both", ls.Mesh)
	case ls.Mesh != "":
		m, ok := meshes[ls.Mesh]
		if !ok {
			return l, fmt.Errorf("mesh = %q: no such mesh in [meshes] (have: %s)", ls.Mesh, strings.Join(sortedKeys(meshes), ", "))
		}
		l.Mesh = m
	default:
		m, err := meshFrom(ls.Shape, ls.Ranks, ls.FirstRank)
		if err != nil {
			return l, err
		}
		l.Mesh = m
	}
	if ls.Placements == nil {
		return l, errors.New("placements: missing; one per mesh axis, e.g. [\"R\", \"S(1)\"]")
	}
	ps, err := layout.ParsePlacements(ls.Placements)
	if err != nil {
		return l, err
	}
	l.Placements = ps
	return l, nil
}

func topologyFrom(ts TopologySpec, ranks []int) (*topo.Topology, error) {
	name := ts.Preset
	if name == "" {
		return nil, fmt.Errorf("preset: missing (known: %s)", strings.Join(PresetNames(), ", "))
	}
	t, err := lookupPreset(name)
	if err != nil {
		return nil, fmt.Errorf("preset: %w", err)
	}
	if err := applyTopology(t, ts); err != nil {
		return nil, err
	}
	// Domains default to as many as the ranks need.
	if ts.Domains != nil {
		t.Domains = *ts.Domains
	} else if t.GPUsPerDomain > 0 {
		maxGPU := 0
		for _, r := range ranks {
			maxGPU = max(maxGPU, t.GPU(r))
		}
		t.Domains = maxGPU/t.GPUsPerDomain + 1
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := t.CheckRanks(ranks); err != nil {
		return nil, err
	}
	return t, nil
}

// applyTopology sets a topology's constants from a [topology] table; the
// fields it leaves unset keep their value.
func applyTopology(t *topo.Topology, ts TopologySpec) error {
	setInt := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setBW := func(dst *units.Bandwidth, v *units.Bandwidth) {
		if v != nil {
			*dst = *v
		}
	}
	setT := func(dst *units.Time, v *units.Time) {
		if v != nil {
			*dst = *v
		}
	}
	setInt(&t.GPUsPerDomain, ts.GPUsPerDomain)
	setInt(&t.NICsPerGPU, ts.NICsPerGPU)
	setBW(&t.NVLink, ts.NVLink)
	setBW(&t.NVLinkLine, ts.NVLinkLine)
	setBW(&t.NIC, ts.NIC)
	setBW(&t.NICLine, ts.NICLine)
	setBW(&t.Memory, ts.Memory)
	if ts.GPUMemory != nil {
		if *ts.GPUMemory < 0 {
			return fmt.Errorf("gpu_memory = %v: must not be negative", units.Bytes(*ts.GPUMemory))
		}
		t.GPUMemoryBytes = int64(*ts.GPUMemory)
	}
	setT(&t.LatencyNVLink, ts.LatencyNVLink)
	setT(&t.LatencyNet, ts.LatencyNet)
	setT(&t.LatencyLocal, ts.LatencyLocal)
	if ts.Oversubscription != nil {
		t.Oversubscription = *ts.Oversubscription
	}
	if p := ts.Placement; p != nil {
		if len(p.Ranks) != len(p.GPUs) {
			return fmt.Errorf("placement: %d ranks but %d gpus; list one GPU per rank", len(p.Ranks), len(p.GPUs))
		}
		t.RankGPU = make(map[int]int, len(p.Ranks))
		for i, r := range p.Ranks {
			if _, dup := t.RankGPU[r]; dup {
				return fmt.Errorf("placement.ranks: rank %d listed twice", r)
			}
			t.RankGPU[r] = p.GPUs[i]
		}
	}
	if e := ts.Executor; e != nil {
		setF := func(dst *float64, v *float64) {
			if v != nil {
				*dst = *v
			}
		}
		x := &t.Executor
		setF(&x.PackLong, e.PackLong)
		setF(&x.PackShort, e.PackShort)
		setF(&x.PackStage, e.PackStage)
		setF(&x.Quantize, e.Quantize)
		setF(&x.QuantizeGeneric, e.QuantizeGen)
		setF(&x.QuantizeRows, e.QuantizeRow)
		setF(&x.QuantizeSplit, e.QuantizeSpl)
		setF(&x.BatchShared, e.BatchShared)
		setF(&x.CopyShared, e.CopyShared)
		setF(&x.NCCLBeside, e.NCCLBeside)
		setF(&x.NCCLBesideBatch, e.BesideBatch)
		for l, c := range []*ExecCostsSpec{topo.OneProcess: e.OneProcess, topo.PerGPU: e.PerGPU} {
			if c == nil {
				continue
			}
			xc := &x.Costs[l]
			setBW(&xc.PairRate, c.PairRate)
			setBW(&xc.DuplexRate, c.DuplexRate)
			setBW(&xc.CopyRate, c.CopyRate)
			setT(&xc.XferLatency, c.XferLatency)
			setT(&xc.GroupLatency, c.GroupLatency)
			setT(&xc.DuplexStart, c.DuplexStart)
			setT(&xc.DuplexStartSmall, c.DuplexSmall)
			setT(&xc.DuplexOpLatency, c.DuplexOpLat)
			setBW(&xc.DuplexOpRate, c.DuplexOpRate)
			setT(&xc.HostGroup, c.HostGroup)
			setT(&xc.HostXfer, c.HostXfer)
			setT(&xc.HostLaunch, c.HostLaunch)
			setT(&xc.HostEvent, c.HostEvent)
			setT(&xc.StartLatency, c.StartLatency)
			setT(&xc.BoxLatency, c.BoxLatency)
			if len(c.RampBytes) != len(c.RampExtra) {
				return fmt.Errorf("executor.%s: %d ramp_bytes but %d ramp_extra; give one time per size", topo.Launch(l), len(c.RampBytes), len(c.RampExtra))
			}
			if c.RampBytes != nil {
				xc.Ramp = nil
				for k := range c.RampBytes {
					b, err := units.ParseBytes(c.RampBytes[k])
					if err != nil {
						return fmt.Errorf("executor.%s.ramp_bytes[%d]: %w", topo.Launch(l), k, err)
					}
					t, err := units.ParseTime(c.RampExtra[k])
					if err != nil {
						return fmt.Errorf("executor.%s.ramp_extra[%d]: %w", topo.Launch(l), k, err)
					}
					xc.Ramp = append(xc.Ramp, topo.RampPoint{Bytes: int64(b), Extra: t})
				}
			}
		}
	}
	return nil
}

// sortedKeys returns a map's keys in order, so output never depends on
// map iteration.
func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Scale shrinks every tensor of the point for runs on small machines: dim 0
// of each tensor becomes ceil(n x f), at least 1. Layouts stay valid
// (torch.chunk handles the new, possibly uneven, sizes).
func (p *Point) Scale(f float64) error {
	if !(f > 0 && f <= 1) {
		return fmt.Errorf("scale %v: must be in (0, 1]", f)
	}
	for i := range p.Tensors {
		t := &p.Tensors[i]
		shape := append([]int64(nil), t.Src.Shape...)
		shape[0] = max(1, int64(math.Ceil(float64(shape[0])*f)))
		if n := t.Src.Shape[0]; t.Quant.On() && len(shape) == 2 {
			// Dim 0 holds blocks: keep every shard of both sides in whole
			// blocks, in a multiple of the block rows times each side's
			// shards of dim 0 (at most the unscaled rows).
			br, _ := t.Quant.Blocks(t.Src.Shape)
			if t.Quant.Scheme == layout.QuantTensor || t.Quant.Scheme == layout.QuantShard {
				br = 1 // the block is the matrix or the shard, whatever its rows
			}
			unit := br * lcm(shards0(t.Src), shards0(t.Dst))
			shape[0] = min(n, (shape[0]+unit-1)/unit*unit)
		}
		t.Src.Shape, t.Dst.Shape = shape, shape
		if t.Quant.Scheme == layout.QuantShard {
			// The shards changed size: so did their blocks.
			q, err := t.Quant.ForLayout(t.Dst)
			if err != nil {
				return fmt.Errorf("tensor %s, scaled to %v: %w", t.Name, shape, err)
			}
			t.Quant = q
		}
	}
	return nil
}

// shards0 is how many pieces a layout splits dim 0 into.
func shards0(l layout.Layout) int64 {
	n := int64(1)
	for a, pl := range l.Placements {
		if pl.Shard && pl.Dim == 0 {
			n *= int64(l.Mesh.Shape[a])
		}
	}
	return n
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// resolve reads a quantized destination: its dtype and scales; the zero
// Quant when dst_dtype is absent or the source dtype.
func (q QuantSpec) resolve(src layout.DType) (layout.DType, layout.Quant, error) {
	if q.DstDType != nil && *q.DstDType == "" {
		return 0, layout.Quant{}, errors.New(`dst_dtype = "": give the destination's dtype ("fp8_e4m3", or the source's), or leave the key out`)
	}
	if q.DstDType == nil {
		if q.Scales != "" || q.Block != nil {
			return 0, layout.Quant{}, errors.New("scales, block: only with dst_dtype = \"fp8_e4m3\"")
		}
		return src, layout.Quant{}, nil
	}
	dd, err := layout.ParseDType(*q.DstDType)
	if err != nil {
		return 0, layout.Quant{}, fmt.Errorf("dst_dtype: %w", err)
	}
	if dd == src {
		return src, layout.Quant{}, nil
	}
	if dd != layout.FP8E4M3 {
		return 0, layout.Quant{}, fmt.Errorf("dst_dtype = %q: a destination dtype other than the source's is \"fp8_e4m3\" (quantized, with scales)", *q.DstDType)
	}
	out := layout.Quant{Scheme: layout.QuantBlock, Block: layout.DefaultBlock}
	if q.Scales != "" {
		if out.Scheme, err = layout.ParseQuantScheme(q.Scales); err != nil {
			return 0, layout.Quant{}, fmt.Errorf("scales: %w", err)
		}
	}
	switch {
	case q.Block != nil && out.Scheme != layout.QuantBlock:
		return 0, layout.Quant{}, fmt.Errorf("block = %v: only block scales have a block (scales = %q)", q.Block, q.Scales)
	case q.Block != nil && (len(q.Block) != 2 || q.Block[0] <= 0 || q.Block[1] <= 0):
		return 0, layout.Quant{}, fmt.Errorf("block = %v: want [rows, cols], both positive", q.Block)
	case q.Block != nil:
		out.Block = [2]int64{q.Block[0], q.Block[1]}
	}
	return dd, out, nil
}

// Match reports whether the point has every coordinate a filter names: a
// filter is "name=value", compared as written ("rho=4").
func (p *Point) Match(filters []string) (bool, error) {
	for _, f := range filters {
		name, val, ok := strings.Cut(f, "=")
		if !ok {
			return false, fmt.Errorf("point filter %q: want name=value", f)
		}
		found := false
		for _, q := range p.Params {
			if q.Name == name {
				found = true
				if FormatValue(q.Value) != val {
					return false, nil
				}
			}
		}
		if !found {
			return false, fmt.Errorf("point filter %q: no sweep is named %q", f, name)
		}
	}
	return true, nil
}
