package calibrate

import (
	"fmt"
	"math"
	"slices"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
	"github.com/m2n-project/m2n/sim"
)

// Fit is what one launch mode's measurements give.
type Fit struct {
	Launch topo.Launch
	// Machine-wide constants (from the one-GPU benches, and NVLink from
	// both directions busy).
	Memory          units.Bandwidth
	LatencyLocal    units.Time
	NVLink          units.Bandwidth // 0 without two GPUs
	PackLong        float64
	PackShort       float64
	PackStage       float64
	Quantize        float64
	QuantGeneric    float64 // 0: not measured
	QuantRows       float64 // 0: not measured
	QuantSplit      float64 // 0: not measured
	BatchShared     float64 // 0: not measured
	CopyShared      float64 // 0: not measured (no beside bench)
	NCCLBeside      float64 // 0: not measured (no beside bench)
	NCCLBesideBatch float64 // 0: not measured (no beside-batch bench)
	// Costs are the launch mode's executor costs.
	Costs topo.ExecCosts
	// Measurements say where each constant comes from.
	Measurements []scenario.MeasurementSpec
	// Notes are what the fit could not resolve (e.g. a host-bound stream).
	Notes []string
	// Command, Date and Machine are the Input's: where the fit comes from.
	Command, Date, Machine string
}

// Input is one launch mode's measurements.
type Input struct {
	Launch topo.Launch
	// GPUsPerProcess is how many GPUs one process issues for: 2 for one
	// process over two GPUs, 1 per GPU under a launcher.
	GPUsPerProcess int
	Samples        map[string]Sample // by bench name
	Counts         map[string]Counts // by bench name: what the host issues (HostCounts)
	Boxes          map[program.BoxClass]BoxSample
	// Quant is the quantize kernel's times on QuantShape (sorted), and
	// QuantBytes the bytes each moves; none: no quantize rate.
	Quant      []units.Time
	QuantBytes int64
	// QuantGen is the generic quantize kernel's times on QuantGenShape in
	// per-channel scales (sorted), and QuantGenBytes the bytes each moves;
	// none: no quantize_generic.
	QuantGen      []units.Time
	QuantGenBytes int64
	// QuantRows is the row kernels' times on QuantGenShape in per-channel
	// scales (sorted), and QuantRowsBytes the bytes each moves; none: no
	// quantize_rows.
	QuantRows      []units.Time
	QuantRowsBytes int64
	// QuantSplit is the split kernels' times on QuantGenShape in a
	// per-tensor scale (sorted), and QuantSplitBytes the bytes each moves
	// (the source counted once); none: no quantize_split.
	QuantSplit      []units.Time
	QuantSplitBytes int64
	// BatchWhole and BatchShared are the batch bench's times (BatchCase)
	// on the whole GPU's grid and on the grid left beside NCCL (sorted);
	// none: no batch_shared.
	BatchWhole, BatchShared []units.Time
	Command                 string // the command that measured them
	Date                    string // when (UTC, RFC 3339)
	Machine                 string // what: GPUs, driver, NCCL
}

func median(ts []units.Time) units.Time { return ts[len(ts)/2] }

// Fitting derives the executor model's constants from the measurements
// (docs/calibration.md, "How each constant is fitted"); every bench of
// Benches(2) must be present for the NCCL constants, those of Benches(1)
// for the rest. Every record it writes carries the launch mode.
func Fitting(in Input) (*Fit, error) {
	f, err := fitting(in)
	if err != nil {
		return nil, err
	}
	for i := range f.Measurements {
		f.Measurements[i].Launch = in.Launch.String()
	}
	return f, nil
}

func fitting(in Input) (*Fit, error) {
	f := &Fit{Launch: in.Launch, Command: in.Command, Date: in.Date, Machine: in.Machine}
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
	bw := func(t units.Time) units.Bandwidth {
		return units.Bandwidth(2 * float64(copyBytes) / (t - cp.HostIssue).Seconds())
	}
	f.Memory = bw(median(cp.Times))
	if !(f.Memory > 0) || math.IsInf(float64(f.Memory), 0) {
		return nil, fmt.Errorf("calibrate: memory (bench copy) came out %v from a median of %v and a host issue of %v: the measurements cannot be a run of the benches", f.Memory, median(cp.Times), cp.HostIssue)
	}
	note("memory", fmtBW(f.Memory), "2 x 1 GiB / (the median copy - its host issue)", cp, fmtBW(bw(cp.Times[len(cp.Times)-1])), fmtBW(bw(cp.Times[0])))

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
	// The host's costs of a launch and of an event: the launches of one
	// stream, and a schedule whose ops wait across streams (waits; events
	// in samples from before it), both issued op by op: two equations in
	// the two costs.
	ln, err := get("launch")
	if err != nil {
		return nil, err
	}
	evName := "waits"
	if _, ok := in.Samples[evName]; !ok {
		evName = "events"
	}
	evs, err := get(evName)
	if err != nil {
		return nil, err
	}
	l1, e1 := in.Counts["launch"].Launches, in.Counts["launch"].Events
	l2, e2 := in.Counts[evName].Launches, in.Counts[evName].Events
	det := float64(l1*e2 - l2*e1)
	if det == 0 || l1 == 0 || e2 == 0 {
		return nil, fmt.Errorf("calibrate: the launch and events benches do not separate launches from events (%d/%d, %d/%d)", l1, e1, l2, e2)
	}
	h1, h2 := float64(ln.HostIssue), float64(evs.HostIssue)
	f.Costs.HostLaunch = max(0, units.Time(math.Round((h1*float64(e2)-h2*float64(e1))/det)))
	f.Costs.HostEvent = max(0, units.Time(math.Round((float64(l1)*h2-float64(l2)*h1)/det)))
	note("executor."+key(mode)+".host_launch", fmtT(f.Costs.HostLaunch), fmt.Sprintf("host issue of %d launches and %d event ops, and of %d and %d (the %s bench), solved for both costs", l1, e1, l2, e2, evName), ln, "", "")
	note("executor."+key(mode)+".host_event", fmtT(f.Costs.HostEvent), "the same two equations", evs, "", "")
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
	// A quantize kernel's rate: its bytes read and written a second over
	// memory's, from the median of its bench's times (none: 0, not measured).
	quantRate := func(constant string, ts []units.Time, bytes int64, what string) (float64, error) {
		if len(ts) == 0 {
			return 0, nil
		}
		q := func(t units.Time) float64 { return float64(bytes) / t.Seconds() / float64(f.Memory) }
		v := math.Min(1, math.Round(q(median(ts))*1000)/1000)
		if !(v > 0) {
			return 0, fmt.Errorf("calibrate: %s came out %g: %d bytes in a median %v cannot be a run of its bench", constant, v, bytes, median(ts))
		}
		f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: constant, Value: fmt.Sprintf("%.3f", v),
			Min: fmt.Sprintf("%.3f", q(ts[len(ts)-1])), Max: fmt.Sprintf("%.3f", q(ts[0])), Samples: len(ts),
			Fit:     "bytes read and written / median quantize of " + what + " / memory",
			Command: in.Command, Date: in.Date, Machine: in.Machine})
		return v, nil
	}
	if f.Quantize, err = quantRate("executor.quantize", in.Quant, in.QuantBytes, fmt.Sprintf("a %v bf16 box in 128 x 128 blocks", QuantShape)); err != nil {
		return nil, err
	}
	if f.QuantGeneric, err = quantRate("executor.quantize_generic", in.QuantGen, in.QuantGenBytes,
		fmt.Sprintf("a %v bf16 box in %d x %d blocks (the generic kernel)", QuantGenShape, QuantGenBlock[0], QuantGenBlock[1])); err != nil {
		return nil, err
	}
	if f.QuantRows, err = quantRate("executor.quantize_rows", in.QuantRows, in.QuantRowsBytes,
		fmt.Sprintf("a %v bf16 box in per-channel scales (1 x %d blocks; the row kernel)", QuantGenShape, QuantGenShape[len(QuantGenShape)-1])); err != nil {
		return nil, err
	}
	if f.QuantSplit, err = quantRate("executor.quantize_split", in.QuantSplit, in.QuantSplitBytes,
		fmt.Sprintf("a %v bf16 box in a per-tensor scale (the split kernels; its source read twice, counted once)", QuantGenShape)); err != nil {
		return nil, err
	}
	if len(in.BatchWhole) > 0 && len(in.BatchShared) > 0 {
		r := func(whole, shared units.Time) float64 { return math.Min(1, float64(whole)/float64(shared)) }
		f.BatchShared = math.Round(r(median(in.BatchWhole), median(in.BatchShared))*1000) / 1000
		f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: "executor.batch_shared", Value: fmt.Sprintf("%.3f", f.BatchShared),
			Min: fmt.Sprintf("%.3f", r(in.BatchWhole[0], in.BatchShared[len(in.BatchShared)-1])), Max: fmt.Sprintf("%.3f", r(in.BatchWhole[len(in.BatchWhole)-1], in.BatchShared[0])),
			Samples: len(in.BatchShared),
			Fit:     fmt.Sprintf("median batch on the whole GPU / median batch on the grid left beside NCCL: box %v of %v bf16 in %d pieces", BatchCase.Size, BatchCase.Full, BatchCase.Pieces),
			Command: in.Command, Date: in.Date, Machine: in.Machine})
	}
	// A box-copy kernel's start latency: the one that makes the simulated
	// graph of the events bench (packs, copies and unpacks) take its
	// measured time.
	eg, err := get("events-graph")
	if err != nil {
		return nil, err
	}
	if f.Costs.BoxLatency, err = f.fitBoxLatency(in, median(eg.Times)); err != nil {
		return nil, err
	}
	note("executor."+key(mode)+".box_latency", fmtT(f.Costs.BoxLatency), "the events bench as a CUDA graph, simulated with the constants above: the pack/unpack latency that gives its median", eg, "", "")
	if _, ok := in.Samples["pair-"+sizeName(PairSizes[0])]; !ok {
		return f, nil // one GPU: no NCCL constants
	}
	// One pair, t(n) = a + n / rate: the rate from the sizes the ramp no
	// longer grows at (64 MiB and up), least squares.
	var xs, ys []float64
	for _, n := range PairSizes {
		if n < rampTop {
			continue
		}
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
		Fit:     fmt.Sprintf("t = %s + bytes / rate, least squares over one send/recv of %s", fmtT(pairFixed), sizeList(rampTop)),
		Command: in.Command, Date: in.Date, Machine: in.Machine})
	// NVLink both ways, by the copy engines.
	peer, err := get("peer-all-pairs")
	if err != nil {
		return nil, err
	}
	pdir := func(t units.Time) units.Bandwidth {
		return units.Bandwidth(float64(allBytes) / (t - peer.HostIssue).Seconds())
	}
	f.NVLink = pdir(median(peer.Times))
	note("nvlink", fmtBW(f.NVLink), "256 MiB each way by device copies / (median - host issue)", peer, fmtBW(pdir(peer.Times[len(peer.Times)-1])), fmtBW(pdir(peer.Times[0])))
	// The same copies as this launch mode runs them (CUDA IPC between
	// processes per GPU): the rate the model gives a copy between GPUs.
	f.Costs.CopyRate = f.NVLink
	note("executor."+key(mode)+".copy_rate", fmtBW(f.Costs.CopyRate), "256 MiB each way by device copies in this launch mode / (median - host issue)", peer,
		fmtBW(pdir(peer.Times[len(peer.Times)-1])), fmtBW(pdir(peer.Times[0])))
	// NCCL both ways: a GPU's channels carry its sends and receives.
	all, err := get("all-pairs")
	if err != nil {
		return nil, err
	}
	if big, ok := in.Samples["all-pairs-1GiB"]; ok && len(big.Times) > 0 {
		// The rate is the slope between the two sizes; what the smaller
		// takes beyond its bytes at that rate and the pair's fixed cost is
		// the start of a group that carries both directions.
		slope := func(tb, ts units.Time) units.Bandwidth {
			return units.Bandwidth(2 * float64(allBigBytes-allBytes) / max(tb-ts, 1).Seconds())
		}
		f.Costs.DuplexRate = slope(median(big.Times), median(all.Times))
		if f.Costs.DuplexRate <= 0 || math.IsInf(float64(f.Costs.DuplexRate), 0) {
			return nil, fmt.Errorf("bench all-pairs-1GiB: %v each way no slower than all-pairs' %v: no duplex rate", median(big.Times), median(all.Times))
		}
		note("executor."+key(mode)+".duplex_rate", fmtBW(f.Costs.DuplexRate),
			fmt.Sprintf("2 x (%s - %s) (one each way) / (median of all-pairs-1GiB - median of all-pairs)", sizeName(allBigBytes), sizeName(allBytes)), big,
			fmtBW(slope(big.Times[len(big.Times)-1], all.Times[0])), fmtBW(slope(big.Times[0], all.Times[len(all.Times)-1])))
		bytesAt := units.Time(math.Round(2 * float64(allBytes) / float64(f.Costs.DuplexRate) * float64(units.Second)))
		f.Costs.DuplexStart = max(0, median(all.Times)-bytesAt-pairFixed)
		note("executor."+key(mode)+".duplex_start", fmtT(f.Costs.DuplexStart),
			fmt.Sprintf("median of all-pairs - 2 x %s / duplex_rate - the pair's fixed cost (%s)", sizeName(allBytes), fmtT(pairFixed)), all, "", "")
	} else {
		duplex := func(t units.Time) units.Bandwidth {
			return units.Bandwidth(2 * float64(allBytes) / max(t-pairFixed, 1).Seconds())
		}
		f.Costs.DuplexRate = duplex(median(all.Times))
		note("executor."+key(mode)+".duplex_rate", fmtBW(f.Costs.DuplexRate), "2 x 256 MiB (one each way) / (median - the pair's fixed cost)", all,
			fmtBW(duplex(all.Times[len(all.Times)-1])), fmtBW(duplex(all.Times[0])))
	}
	// NCCL beside a kernel on each GPU (beside: a 1 GiB local copy on the
	// few blocks waves mode gives it; beside-batch: a batch of box
	// copies): NCCL's own end (the first group's) against all-pairs alone,
	// past the pair's fixed cost and the duplex start, is the share of its
	// rate NCCL keeps. Where the kernel did not outlast NCCL, no share
	// follows: a note, no constant.
	besideShare := func(name, constants string) (float64, Sample, bool) {
		bs, ok := in.Samples[name]
		if !ok || len(bs.Times) == 0 {
			return 0, bs, false
		}
		if bs.GroupEnd <= 0 || bs.GroupEnd >= median(bs.Times)*9/10 {
			f.Notes = append(f.Notes, fmt.Sprintf("bench %s: NCCL's end %v is not well before the iteration's %v (the kernel did not outlast NCCL): %s not measured", name, bs.GroupEnd, median(bs.Times), constants))
			return 0, bs, false
		}
		fixed := pairFixed + f.Costs.DuplexStart
		share := math.Min(1, float64(max(median(all.Times)-fixed, 1))/float64(max(bs.GroupEnd-fixed, 1)))
		return math.Round(share*1000) / 1000, bs, true
	}
	shareFit := func(kernel string, bs Sample) string {
		return fmt.Sprintf("(median of all-pairs - the pair's fixed cost - duplex_start) / (NCCL's end beside the %s (%s) - the same)", kernel, fmtT(bs.GroupEnd))
	}
	if share, bs, ok := besideShare("beside", "copy_shared and nccl_beside"); ok {
		f.NCCLBeside = share
		f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: "executor.nccl_beside", Value: fmt.Sprintf("%.3f", f.NCCLBeside),
			Samples: len(bs.Times), Fit: shareFit("copies", bs), Command: in.Command, Date: in.Date, Machine: in.Machine})
		// The iteration, which the copy outlasts: the copy's rate.
		rate := func(t units.Time) float64 {
			return math.Min(1, 2*float64(copyBytes)/max(t-bs.HostIssue, 1).Seconds()/float64(f.Memory))
		}
		f.CopyShared = math.Round(rate(median(bs.Times))*1000) / 1000
		f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: "executor.copy_shared", Value: fmt.Sprintf("%.3f", f.CopyShared),
			Min: fmt.Sprintf("%.3f", rate(bs.Times[len(bs.Times)-1])), Max: fmt.Sprintf("%.3f", rate(bs.Times[0])), Samples: len(bs.Times),
			Fit:     "2 x 1 GiB / (median of beside - its host issue) / memory: the local copy on its few blocks beside NCCL, which it outlasts",
			Command: in.Command, Date: in.Date, Machine: in.Machine})
	}
	if share, bs, ok := besideShare("beside-batch", "nccl_beside_batch"); ok {
		f.NCCLBesideBatch = share
		f.Measurements = append(f.Measurements, scenario.MeasurementSpec{Constant: "executor.nccl_beside_batch", Value: fmt.Sprintf("%.3f", f.NCCLBesideBatch),
			Samples: len(bs.Times), Fit: shareFit("batch", bs), Command: in.Command, Date: in.Date, Machine: in.Machine})
	}
	// The host: per group from the 1 MiB stream's issue time (less the
	// iteration's own events), per call from 64 calls in one group.
	g1Name := "groups-" + sizeName(StreamWaves[0])
	g1, err := get(g1Name)
	if err != nil {
		return nil, err
	}
	w1 := int(streamBytes / StreamWaves[0])
	hostPerGroup := (g1.HostIssue - units.Time(in.Counts[g1Name].Events)*f.Costs.HostEvent) / units.Time(w1)
	ops, err := get("ops")
	if err != nil {
		return nil, err
	}
	n := units.Time(max(in.GPUsPerProcess, 1))
	opsHost := ops.HostIssue - units.Time(in.Counts["ops"].Events)*f.Costs.HostEvent
	f.Costs.HostXfer = max(0, (opsHost-hostPerGroup)/(units.Time(opsCount-1)*n))
	f.Costs.HostGroup = max(0, hostPerGroup/n-f.Costs.HostXfer)
	note("executor."+key(mode)+".host_group", fmtT(f.Costs.HostGroup),
		fmt.Sprintf("host issue of the %s stream / %d groups / %d GPUs, less a call", sizeName(StreamWaves[0]), w1, n), g1, "", "")
	note("executor."+key(mode)+".host_xfer", fmtT(f.Costs.HostXfer),
		fmt.Sprintf("(host issue of 64 send/recvs in a group - of one) / 63 / %d GPUs", n), ops, "", "")
	// The device. A stream of W groups of w bytes costs, after its first
	// group is issued, the stream's start S once and per group
	// D(w) = send/recv + group + ramp(w) beyond its bytes; one send/recv
	// alone costs its issue, S and D(n) (the pair's intercept at the top of
	// the ramp). The ramp is 0 at 8 MiB; S follows from the 64 MiB stream
	// and the pair's intercept, by iteration.
	bytesT := func(n int64) units.Time { return units.Time(math.Round(float64(n) / float64(f.Costs.PairRate) * 1e12)) }
	first := func(name string) units.Time { // the first group's release
		return units.Time(in.Counts[name].Before)*f.Costs.HostEvent + n*(f.Costs.HostGroup+f.Costs.HostXfer)
	}
	perGroup := map[int64]units.Time{}
	var start units.Time
	for range 20 {
		for _, w := range StreamWaves[1:] {
			name := "groups-" + sizeName(w)
			g, err := get(name)
			if err != nil {
				return nil, err
			}
			perGroup[w] = (median(g.Times)-first(name)-start)/units.Time(streamBytes/w) - bytesT(w)
		}
		pairName := "pair-" + sizeName(PairSizes[len(PairSizes)-1])
		start = max(0, pairFixed-first(pairName)-perGroup[rampTop])
	}
	d8 := perGroup[StreamWaves[1]]
	x := (median(ops.Times) - opsHost - start - units.Time(opsCount)*bytesT(opsBytes) - d8) / (opsCount - 1)
	f.Costs.XferLatency = max(0, x)
	f.Costs.GroupLatency = max(0, d8-f.Costs.XferLatency)
	f.Costs.StartLatency = start
	f.Costs.Ramp = nil
	for _, w := range StreamWaves[1:] {
		f.Costs.Ramp = append(f.Costs.Ramp, topo.RampPoint{Bytes: w, Extra: max(0, perGroup[w]-d8)})
	}
	g8, _ := get("groups-" + sizeName(StreamWaves[1]))
	note("executor."+key(mode)+".xfer_latency", fmtT(f.Costs.XferLatency),
		"(median of 64 send/recvs in a group - host issue - the start - their bytes - a group) / 63", ops, "", "")
	note("executor."+key(mode)+".group_latency", fmtT(f.Costs.GroupLatency),
		fmt.Sprintf("(median of the %s stream - its first issue - the start) / its groups - their bytes - a send/recv", sizeName(StreamWaves[1])), g8, "", "")
	note("executor."+key(mode)+".start_latency", fmtT(f.Costs.StartLatency),
		"the pair's intercept - its issue - a 64 MiB group's cost in a stream", p0, "", "")
	for _, rp := range f.Costs.Ramp {
		g, _ := get("groups-" + sizeName(rp.Bytes))
		note("executor."+key(mode)+".ramp_extra("+sizeName(rp.Bytes)+")", fmtT(rp.Extra),
			fmt.Sprintf("a group's cost in the %s stream - in the %s stream", sizeName(rp.Bytes), sizeName(StreamWaves[1])), g, "", "")
	}
	bs2, err := Benches(2)
	if err != nil {
		return nil, err
	}
	if err := f.fitDuplexStartSmall(in, bs2, note); err != nil {
		return nil, err
	}
	if err := f.fitDuplexOps(in, bs2, note); err != nil {
		return nil, err
	}
	return f, f.check()
}

// fitDuplexStartSmall fits (bs: Benches(2)) the start of a small group both ways
// (duplex_start_small): what all-pairs-16MiB's median takes beyond the
// model of it with every other constant (the start adds to its one
// group's end). Samples without the bench leave it 0.
func (f *Fit) fitDuplexStartSmall(in Input, bs []Bench, note func(constant, value, fit string, s Sample, lo, hi string)) error {
	s, ok := in.Samples["all-pairs-16MiB"]
	if !ok || len(s.Times) == 0 || f.Costs.DuplexStart == 0 {
		return nil
	}
	f.Costs.DuplexStartSmall = 0
	modeled, err := f.modelBench(in, bs, "all-pairs-16MiB")
	if err != nil {
		return err
	}
	f.Costs.DuplexStartSmall = max(0, median(s.Times)-modeled)
	if f.Costs.DuplexStartSmall == 0 {
		return nil // unset means 0: no record of a constant not written
	}
	note("executor."+key(in.Launch.String())+".duplex_start_small", fmtT(f.Costs.DuplexStartSmall),
		fmt.Sprintf("median of all-pairs-16MiB - the model of it with every other constant (%v)", modeled), s, "", "")
	return nil
}

// fitDuplexOps fits (bs: Benches(2)) what a send/recv after the first to a peer costs in a
// group that goes both ways (duplex_op_latency, duplex_op_rate): the
// ManyOps benches' medians against the model of the same benches with
// every other constant fitted, per extra send/recv, at their two sizes.
// Samples without those benches (an older m2n's) leave both 0.
func (f *Fit) fitDuplexOps(in Input, bs []Bench, note func(constant, value, fit string, s Sample, lo, hi string)) error {
	var measured [2]units.Time
	var samples [2]Sample
	for k, m := range ManyOps {
		s, ok := in.Samples[manyName(m.Count, m.Bytes)]
		if !ok || len(s.Times) == 0 {
			return nil
		}
		measured[k], samples[k] = median(s.Times), s
	}
	a, b := ManyOps[0], ManyOps[1]
	// The extra per send/recv at each size, and the constants through them.
	solve := func(extra [2]units.Time) {
		f.Costs.DuplexOpLatency, f.Costs.DuplexOpRate = 0, 0
		if extra[1] > extra[0] {
			f.Costs.DuplexOpRate = units.Bandwidth(float64(b.Bytes-a.Bytes) / (extra[1] - extra[0]).Seconds())
			f.Costs.DuplexOpLatency = max(0, extra[0]-units.Time(math.Round(float64(a.Bytes)/float64(f.Costs.DuplexOpRate)*1e12)))
		} else {
			f.Costs.DuplexOpLatency = max(0, (extra[0]+extra[1])/2)
		}
	}
	// A send/recv's extra time overlaps the other direction's bytes, so
	// the benches grow by less than their extras: correct each size's
	// extra by what the model still misses, until it matches.
	var extra [2]units.Time
	for range 16 {
		solve(extra)
		done := true
		for k, m := range ManyOps {
			modeled, err := f.modelBench(in, bs, manyName(m.Count, m.Bytes))
			if err != nil {
				return err
			}
			miss := (measured[k] - modeled) / units.Time(m.Count-1)
			if miss > 10 || miss < -10 {
				done = false
			}
			extra[k] = max(0, extra[k]+miss)
		}
		if done {
			break
		}
	}
	solve(extra)
	mode := in.Launch.String()
	what := fmt.Sprintf("what makes the model with every other constant take %s's and %s's medians (%v, %v a send/recv after the first)",
		manyName(a.Count, a.Bytes), manyName(b.Count, b.Bytes), extra[0], extra[1])
	if f.Costs.DuplexOpLatency > 0 { // unset means 0: no record of a constant not written
		note("executor."+key(mode)+".duplex_op_latency", fmtT(f.Costs.DuplexOpLatency), what+": the intercept", samples[0], "", "")
	}
	if f.Costs.DuplexOpRate > 0 {
		note("executor."+key(mode)+".duplex_op_rate", fmtBW(f.Costs.DuplexOpRate), what+": the slope", samples[1], "", "")
	}
	return nil
}

// modelBench is the time of bench name (of bs) in the model of the
// constants fitted so far.
func (f *Fit) modelBench(in Input, bs []Bench, name string) (units.Time, error) {
	i := slices.IndexFunc(bs, func(b Bench) bool { return b.Name == name })
	if i < 0 {
		return 0, fmt.Errorf("no bench %s", name)
	}
	b := &bs[i]
	tp := topology()
	g := *f
	g.Measurements = nil
	Apply(tp, &g)
	r, err := sim.Run(b.Schedule, tp, sim.Options{Exec: sim.Exec{Launch: in.Launch, Transport: b.Transport, Graph: b.Graph, WaveBytes: b.WaveBytes, NoBatch: b.NoBatch}})
	if err != nil {
		return 0, fmt.Errorf("bench %s, modeled: %w", name, err)
	}
	return r.Makespan, nil
}

// check refuses a fit whose rates are not finite and positive:
// measurements no run of the benches gives (a host issue as long as the
// bench, times of zero), named. The fractions are capped at 1 as they are
// fitted; copy_rate is nvlink.
func (f *Fit) check() error {
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"nvlink (bench peer-all-pairs)", float64(f.NVLink)},
		{"pair_rate (benches pair-*)", float64(f.Costs.PairRate)},
		{"duplex_rate (bench all-pairs)", float64(f.Costs.DuplexRate)},
		{"pack_long (long-runs box)", f.PackLong},
		{"pack_short (short-runs box)", f.PackShort},
		{"pack_stage (staged box)", f.PackStage},
		{"quantize", f.Quantize},
		{"quantize_generic (quantize-generic)", f.QuantGeneric},
		{"quantize_rows (quantize-rows)", f.QuantRows},
		{"quantize_split (quantize-split)", f.QuantSplit},
		{"batch_shared (batch)", f.BatchShared},
	} {
		if r.v == 0 {
			continue // not measured here (one GPU, no quantize or batch bench)
		}
		if !(r.v > 0) || math.IsInf(r.v, 0) {
			return fmt.Errorf("calibrate: %s came out %g: the measurements cannot be a run of the benches", r.name, r.v)
		}
	}
	return nil
}

// key is a launch mode's table name: "one_process", "per_gpu".
func key(mode string) string {
	if mode == "per-gpu" {
		return "per_gpu"
	}
	return "one_process"
}

func sizeList(from int64) string {
	s := ""
	for _, n := range PairSizes {
		if n < from {
			continue
		}
		if s != "" {
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

// fitBoxLatency finds, by bisection, the box-kernel latency at which the
// simulated events bench (as a CUDA graph, on the constants fitted so far)
// takes the measured time; the simulated time does not fall as it grows.
func (f *Fit) fitBoxLatency(in Input, measured units.Time) (units.Time, error) {
	bs, err := Benches(1)
	if err != nil {
		return 0, err
	}
	var b *Bench
	for i := range bs {
		if bs[i].Name == "events-graph" {
			b = &bs[i]
		}
	}
	tp := topology()
	tp.Memory, tp.LatencyLocal = f.Memory, f.LatencyLocal
	tp.Executor.PackLong, tp.Executor.PackShort, tp.Executor.PackStage = f.PackLong, f.PackShort, f.PackStage
	at := func(d units.Time) (units.Time, error) {
		tp.Executor.Costs[in.Launch] = topo.ExecCosts{BoxLatency: d, HostEvent: 1} // any cost: the model on
		r, err := sim.Run(b.Schedule, tp, sim.Options{Loopback: true, Exec: sim.Exec{Launch: in.Launch, Transport: "copy", Graph: true, NoBatch: b.NoBatch}})
		if err != nil {
			return 0, err
		}
		return r.Makespan, nil
	}
	lo, hi := units.Time(0), 100*units.Microsecond
	if t, err := at(lo); err != nil || t >= measured {
		return 0, err
	}
	for hi-lo > units.Nanosecond {
		mid := (lo + hi) / 2
		t, err := at(mid)
		if err != nil {
			return 0, err
		}
		if t < measured {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2, nil
}
