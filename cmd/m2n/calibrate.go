package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2n-project/m2n/calibrate"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/native"
	"github.com/m2n-project/m2n/program"
)

func runCalibrate(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "calibrate", "[flags]",
		`Measure on this machine's GPUs what the executor model needs (device copy,
pack and unpack by box class, NCCL send/recv by size, both directions, streams
of groups, many calls in one group; the host's cost of each in the launch mode
it runs under) and write a measured topology preset: every constant with its
spread, the command and the date (docs/calibration.md).

Run it once in one process, then under torchrun (one process per GPU) with
--into the same file to add that launch mode's costs.`)
	out := fs.String("out", "-", "write the preset here (\"-\": stdout)")
	into := fs.String("into", "", "start from this measured preset file (keep what this run does not measure)")
	name := fs.String("name", "hgx-h200-measured", "the preset's name")
	base := fs.String("base", "hgx-h200", "the preset it builds on ("+strings.Join(topo.PresetNames(), ", ")+")")
	iters := fs.Int("iters", 20, "timed iterations of each benchmark")
	warmup := fs.Int("warmup", 5, "untimed iterations first")
	timeout := fs.Duration("timeout", 2*time.Minute, "nccl: give up on a peer after this long")
	samples := fs.String("samples", "", "also write this run's raw measurements (every bench's times, in picoseconds) as JSON to this file, to fit again later with --from-samples")
	from := fs.String("from-samples", "", "fit from the raw measurements a run wrote with --samples instead of measuring (no GPU needed)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("calibrate takes no arguments, got %s (the preset goes to --out)", strings.Join(pos, " "))
	}
	if *samples != "" && (*samples == *out || *samples == *into) {
		return usagef("--samples %q is also --out or --into: give the samples a file of their own", *samples)
	}
	if *iters < 3 || *warmup < 0 {
		return usagef("--iters must be at least 3 and --warmup at least 0")
	}
	// The preset this run starts from, read before any bench runs: from
	// --into, or the base preset.
	t, err := topo.Preset(*base)
	if err != nil {
		return usagef("--base: %v", err)
	}
	var old []scenario.MeasurementSpec
	var intoDesc string
	if *into != "" {
		data, err := readCapped(*into, maxPresetBytes, "a preset")
		if err != nil {
			return fmt.Errorf("--into: %w", err)
		}
		doc, pt, err := scenario.ParsePreset(*into, data)
		if err != nil {
			return fmt.Errorf("--into: %w", err)
		}
		t, old, *base, intoDesc = pt, doc.Measurements, doc.Topology.Preset, doc.Description
	}
	var in calibrate.Input
	if *from != "" {
		if *samples != "" {
			return usagef("--samples and --from-samples: give one (samples read are not measured again)")
		}
		if l, err := native.DetectLaunchEnv(); err == nil && l != nil {
			return usagef("--from-samples fits without GPUs: run it once, not under %s", l.Launcher)
		}
		data, err := readCapped(*from, maxSamplesBytes, "raw samples")
		if err != nil {
			return fmt.Errorf("--from-samples: %w", err)
		}
		if in, err = calibrate.ReadSamples(data); err != nil {
			return fmt.Errorf("--from-samples %s: %w", *from, err)
		}
		in.Command += fmt.Sprintf("; fitted again by m2n calibrate --from-samples %s", filepath.Base(*from))
		return fitAndWrite(e, in, t, old, *name, *base, *into, intoDesc, *out, time.Now(), *into == "")
	}
	devs, err := native.Devices()
	if err != nil {
		if errors.Is(err, native.ErrNotSupported) {
			return fmt.Errorf("m2n calibrate needs a GPU build (linux, cgo) and the CUDA driver: %w", err)
		}
		return fmt.Errorf("m2n calibrate: no GPUs: %w", err)
	}
	launch, err := native.DetectLaunchEnv()
	if err != nil {
		return err
	}
	in = calibrate.Input{Launch: topo.OneProcess, GPUsPerProcess: min(len(devs), 2), Samples: map[string]calibrate.Sample{}, Counts: map[string]calibrate.Counts{}, Boxes: map[program.BoxClass]calibrate.BoxSample{}}
	gpus, dev := len(devs), 0
	if launch != nil {
		in.Launch, in.GPUsPerProcess, gpus, dev = topo.PerGPU, 1, launch.World, launch.LocalRank
		if launch.Rank != 0 {
			e = &env{stdout: io.Discard, stderr: e.stderr}
		}
	}
	in.Date = time.Now().UTC().Format(time.RFC3339)
	// The command as run, with file names for paths: a preset travels.
	shown := make([]string, len(args))
	for i, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.Contains(v, "/") {
			a = k + "=" + filepath.Base(v)
		} else if strings.Contains(a, "/") {
			a = filepath.Base(a)
		}
		shown[i] = a
	}
	in.Command = "m2n calibrate " + strings.Join(shown, " ")
	if launch != nil {
		in.Command = fmt.Sprintf("%s, one process per GPU (%s, %d processes)", in.Command, launch.Launcher, launch.World)
	}
	in.Machine = fmt.Sprintf("%d x %s", gpus, devs[min(dev, len(devs)-1)].Name)
	if v, err := native.NCCLVersion(); err == nil {
		in.Machine += fmt.Sprintf(", NCCL %d.%d.%d", v/10000, v/100%100, v%100)
	}
	benches, err := calibrate.Benches(gpus)
	if err != nil {
		return err
	}
	start := time.Now()
	tw := tabwriter.NewWriter(e.stderr, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "bench\tmedian\tmin .. max\thost issue\tgroups\twhat\n")
	for _, b := range benches {
		if err := ctx.Err(); err != nil {
			return err
		}
		opt := native.Options{Backend: native.Loopback, Settings: program.Settings{Transport: b.Transport, Graph: b.Graph, WaveBytes: b.WaveBytes, NoBatch: b.NoBatch}, Device: dev, Iters: *iters, Warmup: *warmup, Timeout: *timeout, Profile: b.Profile}
		if b.GPUs > 1 {
			opt.Backend, opt.Launch, opt.Device = native.NCCL, launch, 0
		}
		res, err := runOnGPU(b.Schedule, opt)
		if err != nil {
			return fmt.Errorf("bench %s: %w", b.Name, err)
		}
		if !res.Verified {
			return fmt.Errorf("bench %s: %d wrong elements; first: %s", b.Name, res.WrongElems, res.FirstWrong)
		}
		s := calibrate.Sample{Times: slices.Sorted(slices.Values(res.Times)), HostIssue: res.HostIssue, Groups: res.Waves}
		if b.Profile {
			if res.ProfileErr != "" || len(res.GroupEnds) == 0 {
				return fmt.Errorf("bench %s: no NCCL group's end timed: %s", b.Name, res.ProfileErr)
			}
			s.GroupEnd = res.GroupEnds[0]
		}
		in.Samples[b.Name] = s
		if in.Counts[b.Name], err = calibrate.HostCounts(&b, in.Launch); err != nil {
			return fmt.Errorf("bench %s: %w", b.Name, err)
		}
		fmt.Fprintf(tw, "%s\t%v\t%v .. %v\t%v\t%d\t%s\n", b.Name, s.Median(), s.Times[0], s.Times[len(s.Times)-1], s.HostIssue, s.Groups, b.What)
	}
	for _, c := range calibrate.BoxCases() {
		p, u, cp, kernel, err := native.TimeBoxCopy(dev, c.Full, c.Start, c.Size, c.Elem, *iters)
		if err != nil {
			return fmt.Errorf("box %v: %w", c.Class, err)
		}
		for _, ts := range [][]units.Time{p, u, cp} {
			slices.Sort(ts)
		}
		in.Boxes[c.Class] = calibrate.BoxSample{Pack: p, Unpack: u, Copy: cp, Kernel: kernel}
		fmt.Fprintf(tw, "box %v\tpack %v\tunpack %v\tcopy %v\t\t%s %v of %v\n", c.Class, p[len(p)/2], u[len(u)/2], cp[len(cp)/2], kernel, c.Size, c.Full)
	}
	qs, gs, gb := calibrate.QuantShape, calibrate.QuantGenShape, calibrate.QuantGenBlock
	for _, q := range []struct {
		name, blocks string
		shape        []int64
		br, bc       int64
		times        *[]units.Time
		bytes        *int64
	}{
		{"quantize", "128 x 128 blocks", qs, 128, 128, &in.Quant, &in.QuantBytes},
		{"quantize-generic", fmt.Sprintf("%d x %d blocks (the generic kernel)", gb[0], gb[1]), gs, gb[0], gb[1], &in.QuantGen, &in.QuantGenBytes},
		{"quantize-rows", "per-channel scales (the row kernel)", gs, 1, gs[len(gs)-1], &in.QuantRows, &in.QuantRowsBytes},
		{"quantize-split", "a per-tensor scale (the split kernels)", gs, gs[len(gs)-2], gs[len(gs)-1], &in.QuantSplit, &in.QuantSplitBytes},
	} {
		ts, b, err := native.TimeQuantize(dev, q.shape, make([]int64, len(q.shape)), q.shape, q.br, q.bc, *iters)
		if err != nil {
			return fmt.Errorf("%s: %w", q.name, err)
		}
		slices.Sort(ts)
		*q.times, *q.bytes = ts, b
		fmt.Fprintf(tw, "%s\t%v\t%v .. %v\t\t\tbf16 -> fp8 %v in %s\n", q.name, ts[len(ts)/2], ts[0], ts[len(ts)-1], q.shape, q.blocks)
	}
	bc := calibrate.BatchCase
	bw, bs, err := native.TimeBatchCopy(dev, bc.Full, bc.Start, bc.Size, bc.Elem, bc.Pieces, *iters)
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	slices.Sort(bw)
	slices.Sort(bs)
	in.BatchWhole, in.BatchShared = bw, bs
	fmt.Fprintf(tw, "batch\t%v\t%v .. %v\t\t\t%d boxes of %v of %v as one batch kernel; on the grid left beside NCCL: %v\n", bw[len(bw)/2], bw[0], bw[len(bw)-1], bc.Pieces, bc.Size, bc.Full, bs[len(bs)/2])
	tw.Flush()
	if launch != nil && launch.Rank != 0 {
		_, err := calibrate.Fitting(in) // the same checks as rank 0's
		return err
	}
	if *samples != "" {
		if err := encodeFileAtomic(e.stdout, "--samples", *samples, func(w io.Writer) error { return calibrate.WriteSamples(w, in) }); err != nil {
			return err
		}
	}
	return fitAndWrite(e, in, t, old, *name, *base, *into, intoDesc, *out, start, false)
}

// maxSamplesBytes is the most a raw samples file may hold (a run's is
// some tens of KB).
const maxSamplesBytes = 64 << 20

// fitAndWrite fits the measurements, sets the constants on t (the
// preset's topology, from --into or the base) and writes the preset with
// its records (old's, less those the fit replaces) to out. strict: a
// constant its records do not account for is an error, not a warning
// (a refit from samples into no older preset has no record to lose).
func fitAndWrite(e *env, in calibrate.Input, t *topo.Topology, old []scenario.MeasurementSpec, name, base, into, intoDesc, out string, start time.Time, strict bool) error {
	f, err := calibrate.Fitting(in)
	if err != nil {
		return err
	}
	for _, n := range f.Notes {
		fmt.Fprintf(e.stderr, "m2n: note: %s\n", n)
	}
	fmt.Fprintf(e.stderr, "m2n: calibrated in %.1f s\n", time.Since(start).Seconds())
	desc := fmt.Sprintf("%s with the constants m2n calibrate measured on %s", base, in.Machine)
	if into != "" {
		desc = intoDesc
	}
	calibrate.Apply(t, f)
	ms := calibrate.Merge(old, f)
	var buf bytes.Buffer
	if err := calibrate.WritePreset(&buf, name, desc, base, t, ms); err != nil {
		return err
	}
	// What was written must read back as written.
	if _, _, err := scenario.ParsePreset("the preset written", buf.Bytes()); err != nil {
		return fmt.Errorf("the preset does not read back: %w", err)
	}
	// Every constant must be traceable to its record; a preset from --into
	// may hold records from before they had launch modes.
	problems := calibrate.Audit(t, ms)
	for _, p := range problems {
		fmt.Fprintf(e.stderr, "m2n: warning: provenance: %s\n", p)
	}
	if strict && len(problems) > 0 {
		return fmt.Errorf("--from-samples: the preset would not account for %d constants (above); nothing written", len(problems))
	}
	fmt.Fprint(e.stderr, t.Describe())
	return encodeFileAtomic(e.stdout, "--out", out, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err })
}
