//go:build cgo

// Package capi is m2n's C ABI, built into libm2n.so by cmd/libm2n with
// go build -buildmode=c-shared (make python): plan a schedule from a
// scenario (TOML) or from tensors (JSON, the scenario file's keys), read
// its IR back as JSON, simulate it, and run it on the host reference
// executor with every destination byte checked, and execute it on the
// calling job's GPU arrays, CUDA stream and NCCL communicator. Each call returns its
// result as a C string the caller frees with m2n_free, or 0 with the error
// in *err (also to be freed); a panic inside becomes an error, never a
// crash of the host process. Handles are plain integers; m2n_close
// releases one.
package capi

/*
#include <stdlib.h>
#include <stdint.h>
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"unsafe"

	"github.com/BurntSushi/toml"

	"github.com/m2n-project/m2n/evaluate"
	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/native"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/reports"
	"github.com/m2n-project/m2n/scenarios"
)

// A plan held for the caller: its point (nil for none) and schedule.
type held struct {
	scenario string
	refs     []scenario.Reference // the scenario's measurements
	point    *scenario.Point
	tp       *topo.Topology
	s        *ir.Schedule
	// exec: the executor m2n_execute prepared, for its rank,
	// communicator, stream and arrays (execKey); prepared again when any
	// changes.
	exec    *native.Executor
	execKey execKey
}

// execKey is what an m2n_execute preparation was made for.
type execKey struct {
	rank         int
	comm, stream uint64
	arrays       string // the table, as given
}

var (
	mu    sync.Mutex
	next  uint64 = 1
	plans        = map[uint64]*held{}
)

func cstr(s string) *C.char { return C.CString(s) }

// guard runs f, turning an error or a panic into *errOut.
func guard(errOut **C.char, f func() error) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if errOut != nil {
				*errOut = cstr(fmt.Sprintf("m2n: internal error (a bug in m2n): %v\n%s", r, debug.Stack()))
			}
			ok = false
		}
	}()
	if err := f(); err != nil {
		if errOut != nil {
			*errOut = cstr(err.Error())
		}
		return false
	}
	return true
}

// planScenario plans one route at one point of a scenario document.
func planScenario(doc, route, point string) (*held, error) {
	if int64(len(doc)) > scenario.MaxFileBytes {
		return nil, fmt.Errorf("scenario: %d bytes, more than %d", len(doc), scenario.MaxFileBytes)
	}
	sc, err := scenario.ParseWith("scenario", []byte(doc), scenarios.LoadModel) // built-in models only
	if err != nil {
		return nil, err
	}
	points, err := sc.Points()
	if err != nil {
		return nil, err
	}
	var p *scenario.Point
	var labels []string
	for _, q := range points {
		labels = append(labels, q.Label())
		if point == "" || q.Label() == point {
			p = q
			break
		}
	}
	if p == nil {
		return nil, fmt.Errorf("point %q: not a point of the scenario (its points: %s)", point, strings.Join(labels, "; "))
	}
	if route == "" {
		route = plan.Hierarchical
	}
	opt := plan.Options{Route: route, Coalesce: plan.DefaultCoalesce}
	if p.Chunk != nil {
		opt.ChunkBytes = int64(*p.Chunk)
	}
	if p.StagingCap != nil {
		opt.StagingCapBytes = int64(*p.StagingCap)
	}
	s, err := evaluate.Build(p, opt)
	if err != nil {
		return nil, err
	}
	return &held{scenario: sc.Name, refs: sc.References, point: p, tp: p.Topology, s: s}, nil
}

// tomlOf writes a JSON document with a scenario file's keys as TOML.
func tomlOf(doc string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("tensors: not a JSON object: %w", err)
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(numbers(v)); err != nil {
		return "", fmt.Errorf("tensors: %w", err)
	}
	return buf.String(), nil
}

// numbers turns JSON numbers into int64 where integral, float64 else.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

func hold(h *held) C.uint64_t {
	mu.Lock()
	defer mu.Unlock()
	id := next
	next++
	plans[id] = h
	return C.uint64_t(id)
}

func lookup(id C.uint64_t) (*held, error) {
	mu.Lock()
	defer mu.Unlock()
	h, ok := plans[uint64(id)]
	if !ok {
		return nil, fmt.Errorf("plan handle %d: not open (closed, or never returned by m2n_plan_*)", uint64(id))
	}
	return h, nil
}

// m2n_plan_scenario plans route (default hierarchical) at point (a label
// as m2n prints it, e.g. "rho=2"; "" for the first) of a scenario
// document (TOML). It returns a handle, or 0 with *err set.
//
//export m2n_plan_scenario
func m2n_plan_scenario(doc, route, point *C.char, errOut **C.char) C.uint64_t {
	var id C.uint64_t
	guard(errOut, func() error {
		h, err := planScenario(C.GoString(doc), C.GoString(route), C.GoString(point))
		if err != nil {
			return err
		}
		id = hold(h)
		return nil
	})
	return id
}

// m2n_plan_json plans a scenario given as JSON with the scenario file's
// keys (name, topology, meshes, tensors, ...), as m2n_plan_scenario.
//
//export m2n_plan_json
func m2n_plan_json(doc, route, point *C.char, errOut **C.char) C.uint64_t {
	var id C.uint64_t
	guard(errOut, func() error {
		t, err := tomlOf(C.GoString(doc))
		if err != nil {
			return err
		}
		h, err := planScenario(t, C.GoString(route), C.GoString(point))
		if err != nil {
			return err
		}
		id = hold(h)
		return nil
	})
	return id
}

// m2n_ir returns the plan's schedule as IR JSON (docs/ir.md).
//
//export m2n_ir
func m2n_ir(id C.uint64_t, errOut **C.char) *C.char {
	var out *C.char
	guard(errOut, func() error {
		h, err := lookup(id)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := ir.Encode(&buf, h.s); err != nil {
			return err
		}
		out = cstr(buf.String())
		return nil
	})
	return out
}

// m2n_simulate simulates the plan on its scenario's topology and returns
// the record m2n sim --json prints for it.
//
//export m2n_simulate
func m2n_simulate(id C.uint64_t, errOut **C.char) *C.char {
	var out *C.char
	guard(errOut, func() error {
		h, err := lookup(id)
		if err != nil {
			return err
		}
		opt := evaluate.Options{Framework: h.point.Framework}
		rec, _, err := evaluate.Schedule(h.s, h.tp, opt)
		if err != nil {
			return err
		}
		evaluate.AtPoint(&rec, h.point, h.refs)
		b, err := json.Marshal(reports.SimJSON(h.scenario, h.tp.Preset, []evaluate.Record{rec}, nil, nil))
		if err != nil {
			return err
		}
		out = cstr(string(b))
		return nil
	})
	return out
}

// m2n_run_host runs the plan on the host reference executor over real
// bytes (in a random valid order from seed) and checks every destination
// byte; it returns {"ops", "checked_bytes", "wrong_bytes", "first_wrong"}.
//
//export m2n_run_host
func m2n_run_host(id C.uint64_t, seed C.uint64_t, errOut **C.char) *C.char {
	var out *C.char
	guard(errOut, func() error {
		h, err := lookup(id)
		if err != nil {
			return err
		}
		res, err := hostexec.Run(h.s, hostexec.Options{Seed: uint64(seed)})
		if err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]any{"ops": res.Ops, "checked_bytes": res.Bytes, "wrong_bytes": res.Wrong, "first_wrong": res.FirstWrong})
		out = cstr(string(b))
		return nil
	})
	return out
}

// arrayDoc is one caller array of m2n_execute's table.
type arrayDoc struct {
	Ptr        *uint64 `json:"ptr"`
	Shape      []int64 `json:"shape"`
	DType      string  `json:"dtype"`
	Device     *int    `json:"device"`
	Contiguous *bool   `json:"contiguous"`
}

// m2n_execute runs the plan once on this process's rank (rank, or -1 for
// the communicator's: given, the arrays are checked before any library
// is loaded): over comm (a
// borrowed ncclComm_t from the NCCL the process loaded; its rank is this
// process's), ordered on stream (a cudaStream_t; 0 the legacy default
// stream) after the work queued there and before what is queued next, on
// the caller's arrays: a JSON object of tensor name -> {"src": A, "dst":
// A} with A = {"ptr", "shape", "dtype", "device" (-1: unknown),
// "contiguous"}, the rank's source and destination shards. The first call (and any with
// another communicator, stream or table) prepares: checks every array
// against the schedule (errors name the tensor and the field), allocates
// staging, compiles the kernels; later calls only issue. It returns 0, or
// 1 with *err set. It does not wait: the caller synchronizes its stream.
// Calls on one handle must not overlap.
//
//export m2n_execute
func m2n_execute(id C.uint64_t, rank C.int, comm, stream C.uint64_t, arrays *C.char, errOut **C.char) C.int {
	ok := guard(errOut, func() error {
		h, err := lookup(id)
		if err != nil {
			return err
		}
		table := C.GoString(arrays)
		key := execKey{int(rank), uint64(comm), uint64(stream), table}
		if h.exec == nil || h.execKey != key {
			var docs map[string]map[string]arrayDoc
			dec := json.NewDecoder(strings.NewReader(table))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&docs); err != nil {
				return fmt.Errorf("arrays: %w", err)
			}
			ext := &native.External{Comm: uintptr(comm), Rank: int(rank), Stream: uintptr(stream), Arrays: map[string]map[string]native.Array{}}
			for name, sides := range docs {
				ext.Arrays[name] = map[string]native.Array{}
				for side, d := range sides {
					if d.Ptr == nil || d.Device == nil || d.Contiguous == nil || d.DType == "" || d.Shape == nil {
						return fmt.Errorf("arrays: tensor %s: %s: want ptr, shape, dtype, device and contiguous", name, side)
					}
					ext.Arrays[name][side] = native.Array{Ptr: *d.Ptr, Shape: d.Shape, DType: d.DType, Device: *d.Device, Contiguous: *d.Contiguous}
				}
			}
			if h.exec != nil {
				err := h.exec.Close() // waits for its last run, then frees
				h.exec = nil
				if err != nil {
					return fmt.Errorf("releasing the previous preparation: %w", err)
				}
			}
			x, err := native.New(h.s, native.Options{Backend: native.NCCL, External: ext})
			if err != nil {
				return err
			}
			h.exec, h.execKey = x, key
		}
		return h.exec.Execute()
	})
	if ok {
		return 0
	}
	return 1
}

// m2n_close releases a plan; closing one that is not open is an error.
//
//export m2n_close
func m2n_close(id C.uint64_t, errOut **C.char) C.int {
	ok := guard(errOut, func() error {
		mu.Lock()
		defer mu.Unlock()
		h, ok := plans[uint64(id)]
		if !ok {
			return errors.New("m2n_close: plan handle not open")
		}
		delete(plans, uint64(id))
		if h.exec != nil {
			return h.exec.Close()
		}
		return nil
	})
	if ok {
		return 0
	}
	return 1
}

// m2n_free frees a string m2n returned.
//
//export m2n_free
func m2n_free(p *C.char) { C.free(unsafe.Pointer(p)) }
