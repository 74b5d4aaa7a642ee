package calibrate

import (
	"fmt"
	"math"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan/program"
)

// Fit is what one launch mode's measurements give.
type Fit struct {
	Launch topo.Launch
	// Machine-wide constants (from the one-GPU benches, and NVLink from
	// both directions busy).
	Memory       units.Bandwidth
	LatencyLocal units.Time
	NVLink       units.Bandwidth // 0 without two GPUs
	PackLong     float64
	PackShort    float64
	PackStage    float64
	GraphCopy    float64
	// Costs are the launch mode's executor costs.
	Costs topo.ExecCosts
	// Measurements say where each constant comes from.
	Measurements []scenario.MeasurementSpec
	// Notes are what the fit could not resolve (e.g. a host-bound stream).
	Notes []string
}

// Input is one launch mode's measurements.
type Input struct {
	Launch topo.Launch
	// GPUsPerProcess is how many GPUs one process issues for: 2 for one
	// process over two GPUs, 1 per GPU under a launcher.
	GPUsPerProcess int
	Samples        map[string]Sample // by bench name
	Boxes          map[program.BoxClass]BoxSample
	Command        string // the command that measured them
	Date           string // when (UTC, RFC 3339)
	Machine        string // what: GPUs, driver, NCCL
}

func median(ts []units.Time) units.Time { return ts[len(ts)/2] }

// Fitting derives the executor model's constants from the measurements
// (docs/calibration.md, "How each constant is fitted"); every bench of
// Benches(2) must be present for the NCCL constants, those of Benches(1)
// for the rest.
func Fitting(in Input) (*Fit, error) {
	f := &Fit{Launch: in.Launch}
	get := func(name string) (Sample, error) {
		s, ok := in.Samples[name]
		if !ok || len(s.Times) == 0 {
			return s, fmt.Errorf("calibrate: no measurement of %s", name)
		}
		return s, nil
	}
	mode := in.Launch.String()
	note := func(constant, value, fit string, s Sample, lo, hi string) {
		f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: constant, Value: value, Min: lo, Max: hi,
			Samples: len(s.Times), Fit: fit, Command: in.Command, Date: in.Date, Machine: in.Machine})
	}
	// Memory: a device copy moves its bytes twice.
	cp, err := get("copy")
	if err != nil {
		return nil, err
	}
	// The timed iteration begins before the host issues the copy.
	bw := func(t units.Time) units.Bandwidth { return units.Bandwidth(2 * float64(copyBytes) / (t - cp.HostIssue).Seconds()) }
	f.Memory = bw(median(cp.Times))
	note("memory", fmtBW(f.Memory), "2 x 1 GiB / (the median copy - its host issue)", cp, fmtBW(bw(cp.Times[len(cp.Times)-1])), fmtBW(bw(cp.Times[0])))
	cg, err := get("copy-graph")
	if err != nil {
		return nil, err
	}
	f.GraphCopy = math.Min(1, math.Round(float64(median(cp.Times))/float64(median(cg.Times))*1000)/1000)
	f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: "executor.graph_copy", Value: fmt.Sprintf("%.3f", f.GraphCopy),
		Samples: len(cg.Times), Fit: "median copy / median of the same copy in a CUDA graph", Command: in.Command, Date: in.Date, Machine: in.Machine})
	// A copy's device latency: 256 copies of 64 KiB back to back in a
	// graph, beyond their bytes at the memory rate.
	lg, err := get("launch-graph")
	if err != nil {
		return nil, err
	}
	per := func(t units.Time) units.Time {
		return max(0, t/launchOps-units.Time(2*float64(launchBytes)/float64(f.Memory)*1e12))
	}
	f.LatencyLocal = per(median(lg.Times))
	note("latency_local", fmtT(f.LatencyLocal), "(median / 256) - 2 x 64 KiB / memory", lg, fmtT(per(lg.Times[0])), fmtT(per(lg.Times[len(lg.Times)-1])))
	// The host's cost of a launch: the same copies issued one by one.
	ln, err := get("launch")
	if err != nil {
		return nil, err
	}
	f.Costs.HostLaunch = ln.HostIssue / launchOps
	note("executor."+key(mode)+".host_launch", fmtT(f.Costs.HostLaunch), "host issue time / 256 launches", ln, "", "")
	// Pack classes: the rate of a pack and an unpack (read plus write)
	// as a fraction of memory.
	for _, c := range BoxCases() {
		b, ok := in.Boxes[c.Class]
		if !ok || len(b.Pack) == 0 || len(b.Unpack) == 0 || len(b.Copy) == 0 {
			return nil, fmt.Errorf("calibrate: no measurement of the %v box", c.Class)
		}
		boxBytes := c.Elem
		for _, n := range c.Size {
			boxBytes *= n
		}
		rate := func(t float64) float64 { return 2 * float64(boxBytes) / (t * 1e-12) / float64(f.Memory) }
		eff := rate((float64(median(b.Pack)) + float64(median(b.Unpack))) / 2)
		eff = math.Min(1, math.Round(eff*1000)/1000)
		name := map[program.BoxClass]string{program.LongRuns: "pack_long", program.ShortRuns: "pack_short", program.Staged: "pack_stage"}[c.Class]
		switch c.Class {
		case program.LongRuns:
			f.PackLong = eff
		case program.ShortRuns:
			f.PackShort = eff
		case program.Staged:
			f.PackStage = eff
		}
		lo := rate(float64(max(b.Pack[len(b.Pack)-1], b.Unpack[len(b.Unpack)-1])))
		hi := rate(float64(min(b.Pack[0], b.Unpack[0])))
		f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: "executor." + name, Value: fmt.Sprintf("%.3f", eff),
			Min: fmt.Sprintf("%.3f", lo), Max: fmt.Sprintf("%.3f", math.Min(hi, 9.999)), Samples: len(b.Pack),
			Fit:     fmt.Sprintf("2 x the box's bytes / mean of median pack and unpack / memory, box %v of %v (%s; a device copy of its bytes: %v)", c.Size, c.Full, b.Kernel, median(b.Copy)),
			Command: in.Command, Date: in.Date, Machine: in.Machine})
	}
	if _, ok := in.Samples["pair-"+sizeName(PairSizes[0])]; !ok {
		return f, nil // one GPU: no NCCL constants
	}
	// One pair: t(n) = a + n / rate, least squares over the sizes.
	var xs, ys []float64
	for _, n := range PairSizes {
		s, err := get("pair-" + sizeName(n))
		if err != nil {
			return nil, err
		}
		xs, ys = append(xs, float64(n)), append(ys, median(s.Times).Seconds())
	}
	a, b, res := line(xs, ys)
	if !(b > 0) {
		return nil, fmt.Errorf("calibrate: the pair's times do not grow with its size (slope %g s/B)", b)
	}
	f.Costs.PairRate = units.Bandwidth(1 / b)
	pairFixed := units.Time(math.Round(a * 1e12))
	p0, _ := get("pair-" + sizeName(PairSizes[len(PairSizes)-1]))
	f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: "executor." + key(mode) + ".pair_rate", Value: fmtBW(f.Costs.PairRate),
		Samples: len(p0.Times), Residual: math.Round(res*1e4) / 1e4,
		Fit:     fmt.Sprintf("t = %s + bytes / rate, least squares over one send/recv of %s", fmtT(pairFixed), sizeList()),
		Command: in.Command, Date: in.Date, Machine: in.Machine})
	// NVLink both ways, by the copy engines.
	peer, err := get("peer-all-pairs")
	if err != nil {
		return nil, err
	}
	pdir := func(t units.Time) units.Bandwidth { return units.Bandwidth(float64(allBytes) / (t - peer.HostIssue).Seconds()) }
	f.NVLink = pdir(median(peer.Times))
	note("nvlink", fmtBW(f.NVLink), "256 MiB each way by device copies / (median - host issue)", peer, fmtBW(pdir(peer.Times[len(peer.Times)-1])), fmtBW(pdir(peer.Times[0])))
	// NCCL both ways: a GPU's channels carry its sends and receives.
	all, err := get("all-pairs")
	if err != nil {
		return nil, err
	}
	duplex := func(t units.Time) units.Bandwidth {
		return units.Bandwidth(2 * float64(allBytes) / max(t-pairFixed, 1).Seconds())
	}
	f.Costs.DuplexRate = duplex(median(all.Times))
	note("executor."+key(mode)+".duplex_rate", fmtBW(f.Costs.DuplexRate), "2 x 256 MiB (one each way) / (median - the pair's fixed cost)", all,
		fmtBW(duplex(all.Times[len(all.Times)-1])), fmtBW(duplex(all.Times[0])))
	// Groups: the host's cost per group from the 1 MiB stream's issue
	// time; the device's per group from the 8 MiB stream beyond its bytes.
	g1, err := get("groups-" + sizeName(StreamWaves[0]))
	if err != nil {
		return nil, err
	}
	g8, err := get("groups-" + sizeName(StreamWaves[1]))
	if err != nil {
		return nil, err
	}
	w1, w8 := int(streamBytes/StreamWaves[0]), int(streamBytes/StreamWaves[1])
	hostPerGroup := g1.HostIssue / units.Time(w1)
	bytesT := func(n int64) units.Time { return units.Time(math.Round(float64(n) / float64(f.Costs.PairRate) * 1e12)) }
	// The stream starts once its first group is issued.
	devPerGroup := (median(g8.Times)-hostPerGroup)/units.Time(w8) - bytesT(StreamWaves[1])
	if hostPerGroup > devPerGroup+bytesT(StreamWaves[1]) {
		f.Notes = append(f.Notes, fmt.Sprintf("the %s group stream is host-bound (%v a group on the host): its device cost is an upper bound", sizeName(StreamWaves[1]), hostPerGroup))
	}
	// Many ops in one group: the host's cost per call, and the device's
	// per send/recv.
	ops, err := get("ops")
	if err != nil {
		return nil, err
	}
	n := units.Time(max(in.GPUsPerProcess, 1))
	f.Costs.HostXfer = max(0, (ops.HostIssue-hostPerGroup)/(units.Time(opsCount-1)*n))
	f.Costs.HostGroup = max(0, hostPerGroup/n-f.Costs.HostXfer)
	note("executor."+key(mode)+".host_group", fmtT(f.Costs.HostGroup),
		fmt.Sprintf("host issue of the %s stream / %d groups / %d GPUs, less a call", sizeName(StreamWaves[0]), w1, n), g1, "", "")
	note("executor."+key(mode)+".host_xfer", fmtT(f.Costs.HostXfer),
		fmt.Sprintf("(host issue of 64 send/recvs in a group - of one) / 63 / %d GPUs", n), ops, "", "")
	x := (median(ops.Times) - ops.HostIssue - units.Time(opsCount)*bytesT(opsBytes) - devPerGroup) / (opsCount - 1)
	f.Costs.XferLatency = max(0, x)
	f.Costs.GroupLatency = max(0, devPerGroup-f.Costs.XferLatency)
	note("executor."+key(mode)+".xfer_latency", fmtT(f.Costs.XferLatency),
		"(median of 64 send/recvs in a group - host issue - their bytes - a group) / 63", ops, "", "")
	note("executor."+key(mode)+".group_latency", fmtT(f.Costs.GroupLatency),
		fmt.Sprintf("(median of the %s stream - a group's host issue) / %d groups - their bytes - a send/recv", sizeName(StreamWaves[1]), w8), g8, "", "")
	return f, nil
}

// key is a launch mode's table name: "one_process", "per_gpu".
func key(mode string) string {
	if mode == "per-gpu" {
		return "per_gpu"
	}
	return "one_process"
}

func sizeList() string {
	s := ""
	for i, n := range PairSizes {
		if i > 0 {
			s += ", "
		}
		s += sizeName(n)
	}
	return s
}

// line fits y = a + b x by least squares; res is the largest relative
// residual.
func line(xs, ys []float64) (a, b, res float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	a = (sy - b*sx) / n
	for i := range xs {
		res = math.Max(res, math.Abs(a+b*xs[i]-ys[i])/ys[i])
	}
	return a, b, res
}

// fmtT writes a time to 10 ns, fmtBW a bandwidth to 0.1 GB/s: the
// precision a preset keeps.
func fmtT(t units.Time) string { return fmt.Sprintf("%.2f us", math.Round(float64(t)/1e4)/100) }

func fmtBW(b units.Bandwidth) string { return fmt.Sprintf("%.1f GB/s", math.Round(b.GBps()*10)/10) }
