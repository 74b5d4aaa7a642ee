package native

import (
	"fmt"
	"maps"
	"runtime"
	"slices"

	"github.com/m2n-project/m2n/ir"
)

// External runs a schedule inside a job that owns the weights (the C ABI's
// m2n_execute, Python's Plan.execute): on the caller's device memory, after
// the work queued on its CUDA stream, over its NCCL communicator. New with
// Options.External set prepares it (staging, streams, events and kernels
// only: sources and destinations stay the caller's); Execute issues one
// refit and returns without waiting. The communicator is borrowed: it must
// come from the libnccl.so.2 this process has loaded (PyTorch's), New uses
// that one and refuses when there is none; m2n never destroys or aborts it.
// While Execute's work runs, nothing else may use the communicator.
type External struct {
	// Comm is the ncclComm_t: its rank is this process's rank of the
	// schedule's world (ranks in world order), its device the GPU used.
	Comm uintptr
	// Rank, when not negative, is the rank the caller says it is: the
	// arrays are checked for it before any library is loaded, and the
	// communicator must agree.
	Rank int
	// Stream is the caller's CUDA stream (0: the legacy default stream).
	// Execute's work starts after what is queued on it, and what the
	// caller queues on it next starts after Execute's work.
	Stream uintptr
	// Arrays gives, per tensor name of the schedule, the caller's arrays
	// on this rank: "src" its source shard, "dst" its destination shard
	// (a quantized tensor's scales are a tensor of their own).
	Arrays map[string]map[string]Array
}

// Array is a caller's device array as m2n checks it: where it starts, its
// shape and dtype, the CUDA device it lives on, and whether it is dense in
// row-major order.
type Array struct {
	Ptr        uint64
	Shape      []int64
	DType      string
	Device     int // -1: not known (CUDA Array Interface)
	Contiguous bool
}

// externalBuffers maps every input and output buffer of rank to the
// caller's array, checking each against what the schedule holds there:
// an error names the tensor and the field. A negative dev checks no
// device.
func externalBuffers(s *ir.Schedule, rank int32, dev int, arrays map[string]map[string]Array) (map[int]uint64, error) {
	out := map[int]uint64{}
	used := map[string]map[string]bool{}
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if int32(b.Rank) != rank || (b.Kind != ir.Input && b.Kind != ir.Output) || !b.Placed() {
			continue
		}
		t := &s.Tensors[b.Tensor]
		side := "src"
		if b.Kind == ir.Output {
			side = "dst"
		}
		a, ok := arrays[t.Name][side]
		if !ok {
			return nil, fmt.Errorf("tensor %s: no %s array given for rank %d (want %v %s on GPU %d)", t.Name, side, rank, b.Box.Size, s.BufDType(int32(i)), dev)
		}
		if used[t.Name] == nil {
			used[t.Name] = map[string]bool{}
		}
		if used[t.Name][side] {
			return nil, fmt.Errorf("tensor %s: rank %d holds its %s in more than one buffer; m2n_execute takes one array a tensor and side", t.Name, rank, side)
		}
		used[t.Name][side] = true
		want := s.BufDType(int32(i))
		switch {
		case a.Ptr == 0:
			return nil, fmt.Errorf("tensor %s: %s: a null pointer", t.Name, side)
		case !slices.Equal(a.Shape, b.Box.Size):
			return nil, fmt.Errorf("tensor %s: %s: shape %v, want %v (rank %d's box %v)", t.Name, side, a.Shape, b.Box.Size, rank, b.Box)
		case a.DType != want.String():
			return nil, fmt.Errorf("tensor %s: %s: dtype %s, want %s", t.Name, side, a.DType, want)
		case dev >= 0 && a.Device >= 0 && a.Device != dev:
			return nil, fmt.Errorf("tensor %s: %s: on GPU %d, want GPU %d (the communicator's)", t.Name, side, a.Device, dev)
		case !a.Contiguous:
			return nil, fmt.Errorf("tensor %s: %s: not contiguous; pass a dense row-major array (.contiguous())", t.Name, side)
		case a.Ptr%uint64(max(want.Size(), 1)) != 0:
			return nil, fmt.Errorf("tensor %s: %s: address %#x is not aligned to its %d-byte elements", t.Name, side, a.Ptr, want.Size())
		}
		out[i] = a.Ptr
	}
	for _, name := range slices.Sorted(maps.Keys(arrays)) {
		for _, side := range slices.Sorted(maps.Keys(arrays[name])) {
			if !used[name][side] {
				if side != "src" && side != "dst" {
					return nil, fmt.Errorf("tensor %s: side %q: want src or dst", name, side)
				}
				if !slices.ContainsFunc(s.Tensors, func(t ir.Tensor) bool { return t.Name == name }) {
					return nil, fmt.Errorf("tensor %s: not in the schedule", name)
				}
				return nil, fmt.Errorf("tensor %s: rank %d holds no %s of it, but an array was given", name, rank, side)
			}
		}
	}
	return out, nil
}

// Execute issues one run of the schedule on an executor made with
// Options.External: ordered after the work queued on the caller's stream,
// and before what the caller queues there next. It does not wait; NCCL's
// and CUDA's asynchronous errors show on the caller's stream.
func (x *Executor) Execute() error {
	if x.opt.External == nil {
		return fmt.Errorf("Execute: the executor was not made with Options.External (Run runs m2n's own buffers)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return x.iteration()
}
