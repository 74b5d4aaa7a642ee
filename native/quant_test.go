package native

import (
	"github.com/m2n-project/m2n/internal/schedtest"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/ir"
)

func TestQuantArgsLayout(t *testing.T) {
	if n := unsafe.Sizeof(quantArgs{}); n != 344 {
		t.Errorf("quantArgs is %d bytes; struct QuantArgs is 344", n)
	}
	if n := unsafe.Sizeof(quantCheckArgs{}); n != 232 {
		t.Errorf("quantCheckArgs is %d bytes; struct QuantCheckArgs is 232", n)
	}
}

// quantSchedule builds a random schedule of one quantized tensor over
// ranks 0..11 (sources 0-5, destinations 4-11), quantized at the source or
// at the destination as its layouts allow.
func quantSchedule(t *testing.T, rng *rand.Rand) *ir.Schedule {
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 4, 3
	for {
		nd := 2 + rng.IntN(2)
		shape := make([]int64, nd)
		for d := range shape {
			shape[d] = 1 + rng.Int64N(17)
		}
		src := schedtest.Layout(rng, shape, []int{0, 1, 2, 3, 4, 5})
		dst := schedtest.Layout(rng, shape, []int{4, 5, 6, 7, 8, 9, 10, 11})
		src.DType = []layout.DType{layout.BF16, layout.FP16, layout.FP32}[rng.IntN(3)]
		dst.DType = layout.FP8E4M3
		if src.Mesh.Validate() != nil || dst.Mesh.Validate() != nil {
			continue
		}
		q := layout.Quant{Scheme: layout.QuantScheme(1 + rng.IntN(3)), Block: [2]int64{1 + rng.Int64N(8), 1 + rng.Int64N(8)}}
		if rng.IntN(2) == 0 {
			q.Block = [2]int64{8, 8} // whole vectors: the vector kernels
		}
		if layout.CheckBlocks(dst, q) != nil {
			continue
		}
		route := plan.Routes[rng.IntN(len(plan.Routes))]
		s, err := plan.Build([]ir.Tensor{{Name: "w.weight", Src: src, Dst: dst, Quant: q}}, tp, plan.Options{Route: route, ChunkBytes: 1 + rng.Int64N(48)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// The fake GPU runs the quantize op (the kernels' work, emulated with the
// reference quantizer) in every backend, and the executor checks every
// fp8 byte and scale against the quantized source pattern.
func TestExecutorQuantizeOnFake(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	kernels := map[string]int{}
	checks := 0
	for i := range 60 {
		s := quantSchedule(t, rng)
		for _, opt := range []Options{
			{Backend: Loopback, Transport: TransportCopy, Lanes: 1 + rng.IntN(4), Iters: 1},
			{Backend: NCCL, Lanes: 1 + rng.IntN(4), Iters: 1},
		} {
			devices := 1
			if opt.Backend == NCCL {
				devices = len(s.World)
			}
			g := newFake(devices, uint64(i))
			res := runOn(t, g, s, opt)
			if !res.Verified {
				t.Fatalf("case %d %s (%s): %d wrong elements; first %s", i, opt.Backend, s.Route, res.WrongElems, res.FirstWrong)
			}
			for k, n := range g.quantKernels {
				kernels[k] += n
			}
			checks += g.quantChecks
		}
	}
	if kernels["quantize_e4m3_1"] == 0 || kernels["quantize_e4m3_4"]+kernels["quantize_e4m3_8"] == 0 || checks == 0 {
		t.Errorf("quantize kernels %v, %d checks: want the scalar and a vector kernel, and checks", kernels, checks)
	}
}

// A wrong fp8 byte or scale fails the check: the executor's verdict on a
// quantized output depends on its bytes.
func TestExecutorQuantizeCheckFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	for _, corrupt := range []string{"fp8", "scale"} {
		s := quantSchedule(t, rng)
		g := newFake(1, 1)
		g.corrupt = corrupt
		res := runOn(t, g, s, Options{Backend: Loopback, Iters: 1})
		if res.Verified || res.WrongElems == 0 {
			t.Errorf("%s corrupted: verified %v, %d wrong", corrupt, res.Verified, res.WrongElems)
		}
	}
}
