package calibrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
)

// SamplesVersion is the version of the raw samples document
// (docs/calibration.md, "Raw samples").
const SamplesVersion = 1

// Ceilings on a samples document, so that reading one has a bounded cost.
const (
	maxSampleBenches = 1000
	maxSampleTimes   = 100000 // timed iterations of one bench
)

// samplesDoc is the JSON of an Input: what `m2n calibrate --samples`
// writes and `--from-samples` reads. Times are integer picoseconds.
type samplesDoc struct {
	Version        int                 `json:"version"`
	Launch         string              `json:"launch"`
	GPUsPerProcess int                 `json:"gpus_per_process"`
	Benches        map[string]benchDoc `json:"benches"`
	Boxes          map[string]boxDoc   `json:"boxes"`
	QuantizePS     []int64             `json:"quantize_ps"`
	Batch          *batchDoc           `json:"batch,omitempty"`
	QuantGen       *quantGenDoc        `json:"quantize_generic,omitempty"`
	QuantRows      *quantGenDoc        `json:"quantize_rows,omitempty"`
	QuantSplit     *quantGenDoc        `json:"quantize_split,omitempty"`
	QuantizeBytes  int64               `json:"quantize_bytes"`
	Command        string              `json:"command"`
	Date           string              `json:"date"`
	Machine        string              `json:"machine"`
}

// benchDoc is one bench's sample and what the host issued for it.
type benchDoc struct {
	TimesPS     []int64 `json:"times_ps"`
	HostIssuePS int64   `json:"host_issue_ps"`
	Groups      int     `json:"groups"`
	Launches    int     `json:"launches"`
	Events      int     `json:"events"`
	EventsFirst int     `json:"events_before_first_op"`
	GroupEndPS  int64   `json:"group_end_ps,omitempty"` // profiled benches: the first NCCL group's end (median)
}

// quantGenDoc is the generic quantize bench's times (QuantGenShape) and
// the bytes each moves.
type quantGenDoc struct {
	PS    []int64 `json:"ps"`
	Bytes int64   `json:"bytes"`
}

// batchDoc is the batch bench's times on the whole GPU and on the grid
// left beside NCCL.
type batchDoc struct {
	WholePS  []int64 `json:"whole_ps"`
	SharedPS []int64 `json:"shared_ps"`
}

// boxDoc is one box class's pack, unpack and copy times.
type boxDoc struct {
	PackPS   []int64 `json:"pack_ps"`
	UnpackPS []int64 `json:"unpack_ps"`
	CopyPS   []int64 `json:"copy_ps"`
	Kernel   string  `json:"kernel"`
}

func ps(ts []units.Time) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = int64(t)
	}
	return out
}

// WriteSamples writes in as a raw samples document (keys sorted), from
// which ReadSamples gives in back and Fitting the same fit.
func WriteSamples(w io.Writer, in Input) error {
	d := samplesDoc{Version: SamplesVersion, Launch: in.Launch.String(), GPUsPerProcess: in.GPUsPerProcess,
		Benches: map[string]benchDoc{}, Boxes: map[string]boxDoc{}, QuantizePS: ps(in.Quant), QuantizeBytes: in.QuantBytes,
		Command: in.Command, Date: in.Date, Machine: in.Machine}
	quantDoc := func(ts []units.Time, bytes int64) *quantGenDoc {
		if len(ts) == 0 {
			return nil
		}
		return &quantGenDoc{PS: ps(ts), Bytes: bytes}
	}
	d.QuantGen, d.QuantRows, d.QuantSplit = quantDoc(in.QuantGen, in.QuantGenBytes), quantDoc(in.QuantRows, in.QuantRowsBytes), quantDoc(in.QuantSplit, in.QuantSplitBytes)
	if len(in.BatchWhole) > 0 || len(in.BatchShared) > 0 {
		d.Batch = &batchDoc{WholePS: ps(in.BatchWhole), SharedPS: ps(in.BatchShared)}
	}
	for name, s := range in.Samples {
		c := in.Counts[name]
		d.Benches[name] = benchDoc{TimesPS: ps(s.Times), HostIssuePS: int64(s.HostIssue), Groups: s.Groups,
			Launches: c.Launches, Events: c.Events, EventsFirst: c.Before, GroupEndPS: int64(s.GroupEnd)}
	}
	for class, b := range in.Boxes {
		d.Boxes[class.String()] = boxDoc{PackPS: ps(b.Pack), UnpackPS: ps(b.Unpack), CopyPS: ps(b.Copy), Kernel: b.Kernel}
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadSamples reads a raw samples document. Every list of times must be
// non-empty, sorted and not negative; the error names the field.
func ReadSamples(data []byte) (Input, error) {
	var d samplesDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Input{}, fmt.Errorf("samples: %w", err)
	}
	if dec.More() {
		return Input{}, fmt.Errorf("samples: data after the document")
	}
	if d.Version != SamplesVersion {
		return Input{}, fmt.Errorf("samples: version = %d: this m2n reads version %d", d.Version, SamplesVersion)
	}
	in := Input{GPUsPerProcess: d.GPUsPerProcess, Samples: map[string]Sample{}, Counts: map[string]Counts{}, Boxes: map[program.BoxClass]BoxSample{},
		QuantBytes: d.QuantizeBytes, Command: d.Command, Date: d.Date, Machine: d.Machine}
	switch d.Launch {
	case topo.OneProcess.String():
		in.Launch = topo.OneProcess
	case topo.PerGPU.String():
		in.Launch = topo.PerGPU
	default:
		return Input{}, fmt.Errorf("samples: launch = %q: want %q or %q", d.Launch, topo.OneProcess, topo.PerGPU)
	}
	if d.GPUsPerProcess < 1 || d.GPUsPerProcess > 2 || (in.Launch == topo.PerGPU && d.GPUsPerProcess != 1) {
		return Input{}, fmt.Errorf("samples: gpus_per_process = %d: want 1 per GPU, 1 or 2 in one process", d.GPUsPerProcess)
	}
	if len(d.Benches) > maxSampleBenches {
		return Input{}, fmt.Errorf("samples: %d benches: at most %d", len(d.Benches), maxSampleBenches)
	}
	times := func(field string, v []int64) ([]units.Time, error) {
		if len(v) == 0 || len(v) > maxSampleTimes {
			return nil, fmt.Errorf("samples: %s: %d times: want 1 to %d", field, len(v), maxSampleTimes)
		}
		if v[0] <= 0 || !slices.IsSorted(v) {
			return nil, fmt.Errorf("samples: %s: times must be sorted ascending and positive", field)
		}
		out := make([]units.Time, len(v))
		for i, t := range v {
			out[i] = units.Time(t)
		}
		return out, nil
	}
	for _, name := range slices.Sorted(maps.Keys(d.Benches)) {
		b := d.Benches[name]
		ts, err := times("benches."+name+".times_ps", b.TimesPS)
		if err != nil {
			return Input{}, err
		}
		if b.HostIssuePS < 0 || b.Groups < 0 || b.Launches < 0 || b.Events < 0 || b.EventsFirst < 0 || b.EventsFirst > b.Events {
			return Input{}, fmt.Errorf("samples: benches.%s: host_issue_ps, groups, launches and events must not be negative, events_before_first_op at most events", name)
		}
		if b.GroupEndPS < 0 {
			return Input{}, fmt.Errorf("samples: benches.%s.group_end_ps = %d: want a non-negative time", name, b.GroupEndPS)
		}
		in.Samples[name] = Sample{Times: ts, HostIssue: units.Time(b.HostIssuePS), Groups: b.Groups, GroupEnd: units.Time(b.GroupEndPS)}
		in.Counts[name] = Counts{Launches: b.Launches, Events: b.Events, Before: b.EventsFirst}
	}
	classes := map[string]program.BoxClass{}
	for _, c := range []program.BoxClass{program.LongRuns, program.ShortRuns, program.Staged} {
		classes[c.String()] = c
	}
	for _, name := range slices.Sorted(maps.Keys(d.Boxes)) {
		c, ok := classes[name]
		if !ok {
			return Input{}, fmt.Errorf("samples: boxes.%s: not a box class (long-runs, short-runs, staged)", name)
		}
		b := d.Boxes[name]
		var s BoxSample
		var err error
		if s.Pack, err = times("boxes."+name+".pack_ps", b.PackPS); err != nil {
			return Input{}, err
		}
		if s.Unpack, err = times("boxes."+name+".unpack_ps", b.UnpackPS); err != nil {
			return Input{}, err
		}
		if s.Copy, err = times("boxes."+name+".copy_ps", b.CopyPS); err != nil {
			return Input{}, err
		}
		s.Kernel = b.Kernel
		in.Boxes[c] = s
	}
	if len(d.QuantizePS) > 0 {
		var err error
		if in.Quant, err = times("quantize_ps", d.QuantizePS); err != nil {
			return Input{}, err
		}
		if d.QuantizeBytes <= 0 {
			return Input{}, fmt.Errorf("samples: quantize_bytes = %d: must be positive with quantize_ps", d.QuantizeBytes)
		}
	}
	// The optional benches of other quantize kernels: times and bytes each.
	for _, q := range []struct {
		name  string
		doc   *quantGenDoc
		times *[]units.Time
		bytes *int64
	}{
		{"quantize_generic", d.QuantGen, &in.QuantGen, &in.QuantGenBytes},
		{"quantize_rows", d.QuantRows, &in.QuantRows, &in.QuantRowsBytes},
		{"quantize_split", d.QuantSplit, &in.QuantSplit, &in.QuantSplitBytes},
	} {
		if q.doc == nil {
			continue
		}
		var err error
		if *q.times, err = times(q.name+".ps", q.doc.PS); err != nil {
			return Input{}, err
		}
		if *q.bytes = q.doc.Bytes; *q.bytes <= 0 {
			return Input{}, fmt.Errorf("samples: %s.bytes = %d: must be positive", q.name, q.doc.Bytes)
		}
	}
	if d.Batch != nil {
		var err error
		if in.BatchWhole, err = times("batch.whole_ps", d.Batch.WholePS); err != nil {
			return Input{}, err
		}
		if in.BatchShared, err = times("batch.shared_ps", d.Batch.SharedPS); err != nil {
			return Input{}, err
		}
	}
	return in, nil
}
