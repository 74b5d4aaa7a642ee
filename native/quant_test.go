package native

import (
	"github.com/m2n-project/m2n/internal/schedtest"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/program"
)

func TestQuantArgsLayout(t *testing.T) {
	if n := unsafe.Sizeof(quantArgs{}); n != 352 {
		t.Errorf("quantArgs is %d bytes; struct QuantArgs is 352", n)
	}
	if n := unsafe.Sizeof(quantCheckArgs{}); n != 368 {
		t.Errorf("quantCheckArgs is %d bytes; struct QuantCheckArgs is 368", n)
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
		if _, err := layout.LandingLayout(dst, q); err != nil {
			continue // shards that cut blocks m2n cannot land whole
		}
		route := plan.Routes[rng.IntN(len(plan.Routes))]
		s, err := plan.Build([]ir.Tensor{{Name: "w.weight", Src: src, Dst: dst, Quant: q}}, tp, plan.Options{Route: route, ChunkBytes: 1 + rng.Int64N(48)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// runVerifiedOnFake runs case i's schedule s for iters iterations on the
// fake GPU in loopback over copies and over NCCL, each at a random count
// of lanes, fails the test unless every byte is right, and returns the two
// fakes for their counters.
func runVerifiedOnFake(t *testing.T, rng *rand.Rand, s *ir.Schedule, i, iters int) []*fakeGPU {
	t.Helper()
	var out []*fakeGPU
	for _, opt := range []Options{
		{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4)}, Iters: iters},
		{Backend: NCCL, Settings: program.Settings{Lanes: 1 + rng.IntN(4)}, Iters: iters},
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
		out = append(out, g)
	}
	return out
}

// The fake GPU runs the quantize op (the kernels' work, emulated with the
// reference quantizer) in every backend, and the executor checks every
// fp8 byte and scale against the quantized source pattern.
func TestExecutorQuantizeOnFake(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	kernels := map[string]int{}
	checks, batched, cut := 0, 0, 0
	for i := range 60 {
		s := quantSchedule(t, rng)
		for _, g := range runVerifiedOnFake(t, rng, s, i, 1) {
			for k, n := range g.quantKernels {
				kernels[k] += n
			}
			checks += g.quantChecks
			batched += g.quantBatches
			cut += g.cutChecks
		}
	}
	if kernels["quantize_e4m3_1"] == 0 || kernels["quantize_e4m3_4"]+kernels["quantize_e4m3_8"] == 0 || checks == 0 {
		t.Errorf("quantize kernels %v, %d checks: want the scalar and a vector kernel, and checks", kernels, checks)
	}
	if batched == 0 {
		t.Error("no quantizes ran as a batch")
	}
	if cut == 0 {
		t.Error("no fp8 output that cuts its blocks was checked")
	}
}

// A destination whose shards cut their blocks (per channel, split by
// columns, as vLLM's row-parallel weights): each rank lands whole rows,
// quantizes them and keeps its columns; its fp8 bytes are checked against
// the pattern quantized over the whole rows (the check's held box), which
// finds a flipped byte.
func TestExecutorCutBlocksOnFake(t *testing.T) {
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 2, 2
	for _, route := range plan.Routes {
		s := cutBlockSchedule(t, tp, []int64{64, 96}, layout.BF16, layout.QuantChannel, route, 1<<10)
		for _, corrupt := range []string{"", "fp8"} {
			g := newFake(4, 9)
			g.corrupt = corrupt
			res := runOn(t, g, s, Options{Backend: NCCL, Iters: 1})
			if res.Verified != (corrupt == "") || g.cutChecks == 0 {
				t.Errorf("%s, corrupt %q: verified %v (%d wrong, first %s), %d checks of cut blocks", route, corrupt, res.Verified, res.WrongElems, res.FirstWrong, g.cutChecks)
			}
		}
	}
}

// Shard scales (a scale a destination shard, vLLM's online FP8) of the
// same row-parallel weight: no rank lands more than its shard, the split
// kernels quantize it (each shard a block large enough), and every fp8
// byte and scale is checked, a flipped byte found.
func TestExecutorShardScalesOnFake(t *testing.T) {
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 2, 2
	for _, route := range plan.Routes {
		s := cutBlockSchedule(t, tp, []int64{64, 1024}, layout.BF16, layout.QuantShard, route, 1<<12)
		if q := s.Tensors[0].Quant; q.Block != [2]int64{64, 512} {
			t.Fatalf("%s: shard scales resolved to %v, want 64 x 512", route, q)
		}
		for _, corrupt := range []string{"", "fp8"} {
			g := newFake(4, 9)
			g.corrupt = corrupt
			res := runOn(t, g, s, Options{Backend: NCCL, Iters: 1})
			split := g.quantKernels["quantize_e4m3_split_bf16"]
			if res.Verified != (corrupt == "") || g.cutChecks != 0 || split == 0 {
				t.Errorf("%s, corrupt %q: verified %v (%d wrong, first %s), %d checks of cut blocks (want none), %d split kernels", route, corrupt, res.Verified, res.WrongElems, res.FirstWrong, g.cutChecks, split)
			}
		}
	}
}

// cutBlockSchedule plans, by route with chunks of chunk bytes, one
// row-parallel weight of that shape and source dtype: split by columns
// over ranks 0-1, to fp8 in scheme's scales (resolved for the
// destination) replicated over two pairs (ranks 0-3) and split by columns
// there, so that per-channel and per-tensor blocks are cut (vLLM's o_proj
// and down_proj at TP 2); shard scales' blocks are the shards.
func cutBlockSchedule(t *testing.T, tp *topo.Topology, shape []int64, dt layout.DType, scheme layout.QuantScheme, route string, chunk int64) *ir.Schedule {
	t.Helper()
	src := layout.Layout{Shape: shape, DType: dt, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.S(1)}}
	dst := layout.Layout{Shape: shape, DType: layout.FP8E4M3, Mesh: layout.Mesh{Shape: []int{2, 2}, Ranks: []int{0, 1, 2, 3}}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	q, err := layout.Quant{Scheme: scheme}.ForLayout(dst)
	if err != nil {
		t.Fatal(err)
	}
	s, err := plan.Build([]ir.Tensor{{Name: "o_proj.weight", Src: src, Dst: dst, Quant: q}}, tp, plan.Options{Route: route, ChunkBytes: chunk})
	if err != nil {
		t.Fatalf("%v %s: %v", scheme, route, err)
	}
	return s
}

// splitSchedule builds a random schedule of one tensor quantized per
// tensor (per lead index) large enough for the split kernels: 16-bit, at
// least 64 rows and 64 vectors of 8 columns (up to rows and vecs more),
// sources on ranks 0-1 and destinations on 2-3 of tp, by a random route
// with chunks of chunk bytes.
func splitSchedule(t *testing.T, rng *rand.Rand, tp *topo.Topology, rows, vecs, chunk int64) *ir.Schedule {
	t.Helper()
	for {
		nd := 2 + rng.IntN(2)
		shape := make([]int64, nd)
		for d := range shape {
			shape[d] = 1 + rng.Int64N(3)
		}
		shape[nd-2], shape[nd-1] = 64+rng.Int64N(rows), 8*(64+rng.Int64N(vecs))
		src := schedtest.Layout(rng, shape, []int{0, 1})
		dst := schedtest.Layout(rng, shape, []int{2, 3})
		src.DType = []layout.DType{layout.BF16, layout.FP16}[rng.IntN(2)]
		dst.DType = layout.FP8E4M3
		q := layout.Quant{Scheme: layout.QuantTensor}
		if src.Mesh.Validate() != nil || dst.Mesh.Validate() != nil || layout.CheckBlocks(dst, q) != nil {
			continue
		}
		route := plan.Routes[rng.IntN(len(plan.Routes))]
		s, err := plan.Build([]ir.Tensor{{Name: "w.weight", Src: src, Dst: dst, Quant: q}}, tp, plan.Options{Route: route, ChunkBytes: chunk})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// The split quantize kernels in the executor (per tensor and per expert
// scales of 16-bit sources large enough): their work memory planned and
// zero at every launch (the fake checks it), never in a batch, every byte
// and scale verified.
func TestExecutorSplitQuantizeOnFake(t *testing.T) {
	rng := rand.New(rand.NewPCG(55, 56))
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 2, 2
	split := 0
	for i := range 12 {
		s := splitSchedule(t, rng, tp, 64, 32, 1<<12)
		for _, g := range runVerifiedOnFake(t, rng, s, i, 2) {
			split += g.quantKernels["quantize_e4m3_split_bf16"] + g.quantKernels["quantize_e4m3_split_fp16"]
		}
	}
	if split == 0 {
		t.Error("no split kernel ran")
	}
}

// An iteration that stops between a split quantize's two launches leaves
// its work memory non-zero; the next iteration zeroes it before issuing
// (the fake refuses a launch on non-zero work), and its bytes are right.
func TestSplitWorkZeroedAfterFailure(t *testing.T) {
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 1, 1
	shape := []int64{128, 512}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{0}}, Placements: []layout.Placement{layout.R}}
	dst := src
	dst.DType = layout.FP8E4M3
	s, err := plan.Build([]ir.Tensor{{Name: "w.weight", Src: src, Dst: dst, Quant: layout.Quant{Scheme: layout.QuantTensor}}}, tp, plan.Options{Route: plan.Flat, ChunkBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	g := newFake(1, 3)
	x, err := newExecutor(s, g, Options{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy}, Iters: 1}, map[int32]int{0: 0}, map[int32]int{0: 0}, map[int][]handle{0: {0, 1000, 2000}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if len(x.works) == 0 {
		t.Fatal("no split quantize planned")
	}
	if err := x.fill(); err != nil {
		t.Fatal(err)
	}
	g.failSplit = 1
	if err := x.iteration(); err == nil {
		t.Fatal("the failed launch was not reported")
	}
	if err := x.iteration(); err != nil {
		t.Fatalf("the iteration after a failed one: %v", err)
	}
	if err := x.syncAll(); err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := x.check(&res); err != nil {
		t.Fatal(err)
	}
	if !res.Verified {
		t.Errorf("%d wrong elements; first %s", res.WrongElems, res.FirstWrong)
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

// Which kernel quantizes a box, and how it is launched: the 128 x 128
// kernels for whole-width 128 x 128 blocks of aligned 16-bit rows, two
// thread blocks a multiprocessor with equal shares; the vector and scalar
// kernels otherwise.
func TestPlanQuantKernel(t *testing.T) {
	for _, c := range []struct {
		size          []int64
		br, bc        int64
		sdt           int32
		src           uint64
		want          string
		threads, grid int
	}{
		{[]int64{16, 256, 7168}, 128, 128, 1, 0, "quantize_e4m3_b128_bf16", 128, 256},
		{[]int64{16, 2048, 7168}, 128, 128, 1, 0, "quantize_e4m3_b128_bf16", 128, 261}, // 55 blocks each
		{[]int64{200, 256}, 128, 128, 2, 0, "quantize_e4m3_b128_fp16", 128, 4},
		{[]int64{256, 256}, 128, 128, 3, 0, "quantize_e4m3_4", 256, 4},
		{[]int64{256, 200}, 128, 128, 1, 0, "quantize_e4m3_8", 256, 4},
		{[]int64{256, 256}, 64, 64, 1, 0, "quantize_e4m3_8", 256, 16},
		{[]int64{256, 256}, 128, 128, 1, 2, "quantize_e4m3_1", 256, 4},
		// per tensor and per expert: the split kernels over rows of tiles
		{[]int64{7168, 8192}, 7168, 8192, 1, 0, "quantize_e4m3_split_bf16", 256, 528},
		{[]int64{16, 2048, 7168}, 2048, 7168, 2, 0, "quantize_e4m3_split_fp16", 256, 528},
		{[]int64{64, 512}, 64, 512, 1, 0, "quantize_e4m3_split_bf16", 256, 64},
		{[]int64{64, 504}, 64, 504, 1, 0, "quantize_e4m3_8", 256, 1}, // below program.SplitMinElems
		{[]int64{7168, 8192}, 7168, 8192, 3, 0, "quantize_e4m3_4", 256, 1},
		{[]int64{7168, 8192}, 4096, 248, 1, 0, "quantize_e4m3_8", 256, 68}, // blocks narrower than program.SplitMinCols
		{[]int64{7168, 8192}, 4096, 256, 1, 0, "quantize_e4m3_split_bf16", 256, 528},
		{[]int64{7168, 8192}, 1, 8192, 1, 0, "quantize_e4m3_rows_bf16", 256, 1056},  // per channel
		{[]int64{4, 700, 1024}, 1, 256, 2, 0, "quantize_e4m3_rows_fp16", 256, 1056}, // 1 x 256 blocks
		{[]int64{7168, 8192}, 1, 8192, 1, 8, "quantize_e4m3_1", 256, 1056},          // off 16-byte alignment
		{[]int64{16, 2048}, 1, 2048, 1, 0, "quantize_e4m3_rows_bf16", 256, 16},
	} {
		nd := len(c.size)
		elem := []int64{0, 2, 2, 4}[c.sdt]
		sb := append(append([]int64(nil), c.size[:nd-2]...), (c.size[nd-2]+c.br-1)/c.br, (c.size[nd-1]+c.bc-1)/c.bc)
		a, kernel := planQuantArrays(c.src, 1<<20, 1<<30, program.RowMajor(c.size), program.RowMajor(c.size), program.RowMajor(sb), c.size, c.br, c.bc, c.sdt, elem)
		nb := a.Lead * a.NBR * a.NBC
		if program.IsSplitKernel(kernel) {
			nb = a.Lead * a.Rows * a.NBC // launched over tiles
		}
		threads, grid := quantGrid(kernel, nb, 132, 0)
		if kernel != c.want || threads != c.threads || grid != int64(c.grid) {
			t.Errorf("%v in %dx%d blocks, dtype %d at %#x: %s on %d x %d threads; want %s on %d x %d", c.size, c.br, c.bc, c.sdt, c.src,
				kernel, grid, threads, c.want, c.grid, c.threads)
		}
	}
}

// The model classes every quantize op as the executor launches it:
// program.QuantKernelOf, from the schedule alone, names the kernel family
// planQuant picks from the addresses placement gives (random quantized
// schedules, with and without a staging cap's arena).
func TestQuantKernelOfMatchesExecutor(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	seen := map[program.QuantKernel]int{}
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 4, 3
	b128 := func() *ir.Schedule { // shapes of whole 128 x 128 blocks, the fast kernel's
		for {
			shape := []int64{1 + rng.Int64N(3), 128 * (1 + rng.Int64N(4)), 128 * (1 + rng.Int64N(4))}
			src := schedtest.Layout(rng, shape, []int{0, 1, 2, 3})
			dst := schedtest.Layout(rng, shape, []int{4, 5, 6, 7})
			src.DType, dst.DType = []layout.DType{layout.BF16, layout.FP16}[rng.IntN(2)], layout.FP8E4M3
			q := layout.Quant{Scheme: layout.QuantScheme(1), Block: [2]int64{128, 128}}
			if src.Mesh.Validate() != nil || dst.Mesh.Validate() != nil || layout.CheckBlocks(dst, q) != nil {
				continue
			}
			opt := plan.Options{Route: plan.Routes[rng.IntN(len(plan.Routes))], ChunkBytes: 1 << (10 + rng.IntN(8))}
			if rng.IntN(2) == 0 {
				opt.StagingCapBytes = 1 << 20
			}
			s, err := plan.Build([]ir.Tensor{{Name: "w.weight", Src: src, Dst: dst, Quant: q}}, tp, opt)
			if err != nil {
				continue // a cap below a unit's need
			}
			return s
		}
	}
	for k := range 240 {
		s := quantSchedule(t, rng)
		if k%3 != 0 {
			s = b128()
		}
		if k%3 == 2 {
			// Off 16-byte alignment: a quantize's source or destination
			// buffer moved into the staging arena at an offset of 8 or 16
			// bytes (the generic kernel, and the 128 x 128 one; not a
			// valid schedule, only classified).
			for i := range s.Ops {
				if op := &s.Ops[i]; op.Kind == ir.Quantize {
					r := op.Src
					if rng.IntN(2) == 0 {
						r = op.Dst
					}
					if b := &s.Buffers[r.Buf]; !b.InArena {
						b.InArena, b.ArenaOffset = true, int64(8*(1+rng.IntN(2)))
					}
				}
			}
		}
		off, _, _, _ := placement(s, nil)
		x := &Executor{s: s, bufAddr: make([]uint64, len(s.Buffers))}
		for i := range s.Buffers {
			x.bufAddr[i] = 1<<40 + uint64(s.Buffers[i].Rank)<<32 + uint64(off[i])
		}
		for i := range s.Ops {
			if s.Ops[i].Kind != ir.Quantize {
				continue
			}
			a, kernel, err := x.planQuant(int32(i))
			if err != nil {
				t.Fatal(err)
			}
			// Where every buffer is placed aligned, the model's name and
			// blocks are the executor's: a batch splits alike
			// (program.SplitQuantBatch).
			if _, name, nb, err := program.QuantKernelNameOf(s, int32(i)); err != nil {
				t.Fatal(err)
			} else if k%3 != 2 && (name != kernel || nb != a.Lead*a.NBR*a.NBC) {
				t.Fatalf("op %d (%s): QuantKernelNameOf says %s on %d blocks, the executor runs %s on %d", i, s.Route, name, nb, kernel, a.Lead*a.NBR*a.NBC)
			}
			want := program.QuantGeneric
			switch {
			case strings.HasPrefix(kernel, "quantize_e4m3_b128_"):
				want = program.QuantB128
			case strings.HasPrefix(kernel, "quantize_e4m3_rows_"):
				want = program.QuantRows
			case program.IsSplitKernel(kernel):
				want = program.QuantSplit
			}
			got, err := program.QuantKernelOf(s, int32(i))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("op %d (%s): QuantKernelOf says %v, the executor runs %s", i, s.Route, got, kernel)
			}
			seen[got]++
		}
	}
	if seen[program.QuantB128] == 0 || seen[program.QuantGeneric] == 0 {
		t.Errorf("kernels seen %v: want both", seen)
	}
}
