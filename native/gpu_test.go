//go:build linux && cgo

package native

import (
	"errors"
	"fmt"
	"github.com/m2n-project/m2n/internal/schedtest"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/kernels"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/program"
)

// skipWithoutGPU skips a test where CUDA or a GPU is absent and fails it on
// any other error.
func skipWithoutGPU(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, ErrNotSupported) || errors.Is(err, ErrNoDevice) {
		tb.Skipf("no GPU here: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

func TestLibraryNotFound(t *testing.T) {
	err := openLib("libfoo", "M2N_FOO_LIB", []string{"libm2n-surely-absent.so.7"}, nil)
	var le *LibraryError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "libm2n-surely-absent.so.7") || !strings.Contains(err.Error(), "M2N_FOO_LIB") {
		t.Fatalf("error %v: want one naming the path and the variable", err)
	}
	if !errors.Is(err, ErrNotSupported) {
		t.Error("a missing library should read as not supported, so GPU tests skip")
	}
}

func TestGPUDevices(t *testing.T) {
	devs, err := Devices()
	skipWithoutGPU(t, err)
	if len(devs) == 0 {
		t.Fatal("the driver loaded but lists no GPU")
	}
	arch := regexp.MustCompile(`^sm_[1-9][0-9]+$`)
	for i, d := range devs {
		t.Logf("GPU %d: %s, %s, %s, %s, %d SMs", d.Index, d.Name, units.Bytes(d.Memory).Human(), d.PCIBusID, d.Arch, d.SMs)
		if d.Index != i || d.Name == "" || d.Memory < 1<<30 || d.PCIBusID == "" || !arch.MatchString(d.Arch) || d.SMs <= 0 {
			t.Errorf("GPU %d: %+v: want its index, a name, at least 1 GiB, a PCI bus id, an sm_XY arch and SMs", i, d)
		}
	}
}

func TestGPUCompileError(t *testing.T) {
	devs, err := Devices()
	skipWithoutGPU(t, err)
	if err := loadNVRTC(); err != nil {
		skipWithoutGPU(t, err)
	}
	_, err = compileSource("extern \"C\" __global__ void k() { this is not C++; }", "--gpu-architecture="+devs[0].Arch)
	var ce *CompileError
	if !errors.As(err, &ce) || !strings.Contains(ce.Log, "error") {
		t.Fatalf("got %v, want a compile error with NVRTC's log", err)
	}
}

// The kernels' compile by NVRTC, in one thread and split over the host's
// cores (splitCompile): what a process pays before its first launch
// (where CUDA's compute cache does not hold the result:
// CUDA_CACHE_DISABLE=1 times a compile).
func BenchmarkGPUCompile(b *testing.B) {
	devs, err := Devices()
	skipWithoutGPU(b, err)
	if err := loadNVRTC(); err != nil {
		skipWithoutGPU(b, err)
	}
	for _, c := range []struct {
		name string
		opts []string
	}{{"one-thread", kernelOptions(devs[0].Arch, false)}, {"split", kernelOptions(devs[0].Arch, true)}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				if _, err := compileSource(kernels.Source, c.opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Random schedules run on the GPU, every destination byte checked there.
func TestGPULoopbackRandom(t *testing.T) {
	if _, err := Devices(); err != nil {
		skipWithoutGPU(t, err)
	}
	rng := rand.New(rand.NewPCG(41, 42))
	n := 40
	for i := range n {
		s := schedtest.Random(t, rng)
		for _, opt := range []Options{
			{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4), Graph: i%2 == 0}, Iters: 2},
			{Backend: Loopback, Settings: program.Settings{Transport: TransportNCCL, Lanes: 1 + rng.IntN(4)}, Iters: 2},
			// Pushed copies with flags, as one process per GPU runs them
			// over CUDA IPC (its flag kernels and stream memory ops on
			// this GPU), over several iterations: every flag reset.
			{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4)}, Iters: 3, push: true},
		} {
			runGPU(t, i, s, opt)
		}
	}
}

// Random schedules over every GPU of the machine, one rank per GPU in one
// process: NCCL groups (cut at random sizes) and NVLink peer copies, every
// destination byte checked on its GPU.
func TestGPUMultiRandom(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		skipWithoutGPU(t, err)
	}
	if len(devs) < 2 {
		t.Skipf("%d GPU here; the test needs 2 or more", len(devs))
	}
	n := len(devs)
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 1, n // one virtual domain per GPU: forwarding routes
	ranks := layout.RankRange(0, n)
	rng := rand.New(rand.NewPCG(43, 44))
	for i := 0; i < 24; {
		nd := 1 + rng.IntN(3)
		shape := make([]int64, nd)
		for d := range shape {
			shape[d] = 1 + rng.Int64N(300)
		}
		src, dst := schedtest.Layout(rng, shape, ranks), schedtest.Layout(rng, shape, ranks)
		dst.DType = src.DType
		if src.Mesh.Validate() != nil || dst.Mesh.Validate() != nil {
			continue
		}
		route := plan.Routes[i%len(plan.Routes)]
		s, err := plan.Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, plan.Options{Route: route, ChunkBytes: 1 + rng.Int64N(64<<10)})
		if err != nil {
			t.Fatal(err)
		}
		for _, opt := range []Options{
			{Backend: NCCL, Settings: program.Settings{WaveBytes: []int64{0, -1, 1 + rng.Int64N(128<<10)}[i%3]}, Iters: 2},
			{Backend: NCCL, Settings: program.Settings{Transport: TransportCopy, Graph: i%2 == 0}, Iters: 2},
		} {
			runGPU(t, i, s, opt)
		}
		i++
	}
}

// runGPU runs case i on the GPU and fails the test unless every
// destination byte is right.
func runGPU(t *testing.T, i int, s *ir.Schedule, opt Options) *Result {
	t.Helper()
	x, err := New(s, opt)
	skipWithoutGPU(t, err)
	res, err := x.Run()
	x.Close()
	if err != nil {
		t.Fatalf("case %d %s/%s: %v", i, opt.Backend, opt.Transport, err)
	}
	if !res.Verified {
		t.Fatalf("case %d %s/%s (%s): %d wrong elements; first %s", i, opt.Backend, opt.Transport, s.Route, res.WrongElems, res.FirstWrong)
	}
	return res
}

// paperTensor is the paper's layer with experts scaled by 1/f.
func paperTensor(rho int, experts int64) []ir.Tensor {
	shape := []int64{experts, 2048, 7168}
	return []ir.Tensor{{Name: "gate_proj",
		Src: layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16}, Ranks: layout.RankRange(0, 16)}, Placements: []layout.Placement{layout.S(0)}},
		Dst: layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{rho, 8}, Ranks: layout.RankRange(72, 8*rho)}, Placements: []layout.Placement{layout.R, layout.S(1)}},
	}}
}

func TestGPUPaperScaled(t *testing.T) {
	if _, err := Devices(); err != nil {
		skipWithoutGPU(t, err)
	}
	tp, _ := topo.Preset("gb200-nvl72")
	tp.Domains = 2
	for _, route := range plan.Routes {
		s, err := plan.Build(paperTensor(2, 16), tp, plan.Options{Route: route})
		if err != nil {
			t.Fatal(err)
		}
		x, err := New(s, Options{Backend: Loopback, Settings: program.Settings{Graph: true}, Iters: 3})
		skipWithoutGPU(t, err)
		res, err := x.Run()
		x.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !res.Verified {
			t.Fatalf("%s: %d wrong elements; first %s", route, res.WrongElems, res.FirstWrong)
		}
		t.Logf("%s: %v per iteration, %s", route, res.Times, res.Mode)
	}
}

func TestGPUTooBig(t *testing.T) {
	if _, err := Devices(); err != nil {
		skipWithoutGPU(t, err)
	}
	tp, _ := topo.Preset("gb200-nvl72")
	tp.Domains = 2
	s, err := plan.Build(paperTensor(8, 256*16), tp, plan.Options{Route: plan.Flat, ChunkBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(s, Options{Backend: Loopback})
	if err == nil || !strings.Contains(err.Error(), "free of") || !strings.Contains(err.Error(), "--scale") {
		t.Fatalf("got %v, want a refusal naming the sizes", err)
	}
}

// firstGPU opens the first GPU for a test or benchmark, skipping it where
// there is none, and closes it when the test ends: the GPU, its index and
// a stream on it.
func firstGPU(tb testing.TB) (*cudaGPU, int, handle) {
	tb.Helper()
	devs, err := Devices()
	skipWithoutGPU(tb, err)
	g, err := newCUDA([]int{devs[0].Index}, time.Minute)
	skipWithoutGPU(tb, err)
	tb.Cleanup(func() { g.close() })
	dev := devs[0].Index
	st, _ := g.newStream(dev)
	return g, dev, st
}

// readBack waits for st's work and returns the n bytes at base on dev.
func readBack(tb testing.TB, g *cudaGPU, dev int, st handle, base uint64, n int) []byte {
	tb.Helper()
	if err := g.sync(st); err != nil {
		tb.Fatal(err)
	}
	got := make([]byte, n)
	if err := g.download(dev, got, base); err != nil {
		tb.Fatal(err)
	}
	return got
}

// medianOf10 returns a function that times f on stream st: the median
// device time of ten runs after a warm-up.
func medianOf10(b *testing.B, g *cudaGPU, st handle) func(f func() error) units.Time {
	tm, err := g.newTimer(st)
	if err != nil {
		b.Fatal(err)
	}
	return func(f func() error) units.Time {
		times, err := tm.runs(10, f)
		if err != nil {
			b.Fatal(err)
		}
		return medianTime(times)
	}
}

// Every box-copy kernel, on random geometries (odd row pitches, every
// element size, runs from one element to many KiB), matches a host copy.
func TestGPUBoxCopyKernels(t *testing.T) {
	g, dev, st := firstGPU(t)
	rng := rand.New(rand.NewPCG(43, 44))
	kernels := map[string]int{}
	for i := range 300 {
		nd := 1 + rng.IntN(3)
		srcFull, dstFull, size := make([]int64, nd), make([]int64, nd), make([]int64, nd)
		srcStart, dstStart := make([]int64, nd), make([]int64, nd)
		for d := range nd {
			size[d] = 1 + rng.Int64N([]int64{4, 40, 3000}[rng.IntN(3)])
			srcStart[d], dstStart[d] = rng.Int64N(5), rng.Int64N(5)
			srcFull[d] = srcStart[d] + size[d] + rng.Int64N(9)
			dstFull[d] = dstStart[d] + size[d] + rng.Int64N(9)
		}
		elem := int64(1 << rng.IntN(4))
		bytes := func(full []int64) int64 {
			n := elem
			for _, v := range full {
				n *= v
			}
			return n
		}
		if bytes(srcFull)+bytes(dstFull) > 64<<20 {
			continue
		}
		host := make([]byte, bytes(srcFull)+bytes(dstFull)+64)
		for k := range host {
			host[k] = byte(rng.IntN(256))
		}
		base, err := g.alloc(dev, int64(len(host)))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.upload(dev, base, host); err != nil {
			t.Fatal(err)
		}
		srcOff, dstOff := uint64(2*rng.IntN(8)), uint64(bytes(srcFull)+32)
		a, kernel, err := planBoxCopy(view{base + srcOff, srcFull, srcStart}, view{base + dstOff, dstFull, dstStart}, size, elem)
		if err != nil {
			t.Fatal(err)
		}
		kernels[kernel]++
		if err := g.boxCopy(&a, kernel, st); err != nil {
			t.Fatal(err)
		}
		got := readBack(t, g, dev, st, base, len(host))
		ha, _, _ := planBoxCopy(view{srcOff, srcFull, srcStart}, view{dstOff, dstFull, dstStart}, size, elem)
		emulateBoxCopy(host, ha)
		if string(got) != string(host) {
			first, n := -1, 0
			for k := range got {
				if got[k] != host[k] {
					if first < 0 {
						first = k
					}
					n++
				}
			}
			t.Errorf("case %d: %s copied box %v (elem %d) from %v@%v (+%d) to %v@%v wrong: %d bytes differ, first at %d (dst offset %d); args %+v",
				i, kernel, size, elem, srcFull, srcStart, srcOff, dstFull, dstStart, n, first, int64(first)-int64(dstOff), a)
		}
		g.free(dev, base)
	}
	t.Logf("kernels exercised: %v", kernels)
}

// Pack and unpack throughput against a device copy of the same bytes.
// Run with -test.bench GPU on a GPU machine; `make gpu-test` builds it.
func BenchmarkGPUBoxCopy(b *testing.B) {
	devs, err := Devices()
	skipWithoutGPU(b, err)
	g, err := newCUDA([]int{0}, time.Minute)
	skipWithoutGPU(b, err)
	defer g.close()
	type tc struct {
		name  string
		full  []int64 // the strided side's array
		start []int64
		size  []int64
		elem  int64
	}
	rng := rand.New(rand.NewPCG(7, 7))
	cases := []tc{
		{"paper-pack-box", []int64{16, 2048, 7168}, []int64{0, 256, 0}, []int64{16, 256, 7168}, 2},
		{"paper-row-slab", []int64{16, 2048, 7168}, []int64{0, 0, 1024}, []int64{16, 2048, 1024}, 2},
		{"column-block", []int64{8192, 8192}, []int64{0, 4096}, []int64{8192, 1024}, 2},
		{"narrow-rows", []int64{65536, 4096}, []int64{0, 0}, []int64{65536, 64}, 2},
	}
	for i := range 3 {
		full := []int64{int64(8 + rng.IntN(32)), int64(512 + rng.IntN(4096)), int64(256 + rng.IntN(2048))}
		size := []int64{full[0], full[1] / 2, full[2] - int64(rng.IntN(64))*2}
		cases = append(cases, tc{fmt.Sprintf("random-%d", i), full, []int64{0, full[1] / 4, 0}, size, 2})
	}
	dev := devs[0].Index
	st, _ := g.newStream(dev)
	timeIt := medianOf10(b, g, st)
	for _, c := range cases {
		var fullBytes, boxBytes int64 = c.elem, c.elem
		for k := range c.full {
			fullBytes *= c.full[k]
			boxBytes *= c.size[k]
		}
		strided, err := g.alloc(dev, fullBytes)
		if err != nil {
			b.Fatal(err)
		}
		packed, err := g.alloc(dev, boxBytes)
		if err != nil {
			b.Fatal(err)
		}
		zero := make([]int64, len(c.size))
		pack, pk, _ := planBoxCopy(view{strided, c.full, c.start}, view{packed, c.size, zero}, c.size, c.elem)
		unpack, uk, _ := planBoxCopy(view{packed, c.size, zero}, view{strided, c.full, c.start}, c.size, c.elem)
		if c.name == "paper-pack-box" {
			// Launch geometry: threads per block x blocks per SM.
			for _, geo := range [][2]int{{256, 8}, {512, 4}, {512, 8}, {1024, 2}, {1024, 4}, {256, 16}} {
				copyBlock, copyBlocksPer = geo[0], geo[1]
				tp := timeIt(func() error { return g.boxCopy(&pack, pk, st) })
				tu := timeIt(func() error { return g.boxCopy(&unpack, uk, st) })
				fmt.Fprintf(os.Stderr, "geometry %4d threads x %2d blocks/SM: pack %.0f GB/s, unpack %.0f GB/s\n", geo[0], geo[1],
					float64(2*boxBytes)/tp.Seconds()/1e9, float64(2*boxBytes)/tu.Seconds()/1e9)
			}
			copyBlock, copyBlocksPer = 512, 4
		}
		b.Run(c.name, func(b *testing.B) {
			var tp, tu, tc units.Time
			for b.Loop() {
				tp = timeIt(func() error { return g.boxCopy(&pack, pk, st) })
				tu = timeIt(func() error { return g.boxCopy(&unpack, uk, st) })
				tc = timeIt(func() error { return g.copy(packed, strided, boxBytes, st) })
			}
			rw := func(t units.Time) float64 { return float64(2*boxBytes) / t.Seconds() / 1e9 }
			b.ReportMetric(rw(tp), "pack-GB/s")
			b.ReportMetric(rw(tu), "unpack-GB/s")
			b.ReportMetric(rw(tc), "copy-GB/s")
			b.ReportMetric(float64(tc)/float64(tp), "pack/copy")
			b.ReportMetric(float64(tc)/float64(tu), "unpack/copy")
			fmt.Fprintf(os.Stderr, "box %-15s %-8s %9s  pack %7.0f GB/s (%s)  unpack %7.0f GB/s (%s)  copy %7.0f GB/s  pack/copy %.2f unpack/copy %.2f\n",
				c.name, units.Bytes(boxBytes).Human(), fmt.Sprint(c.size), rw(tp), pk, rw(tu), uk, rw(tc), float64(tc)/float64(tp), float64(tc)/float64(tu))
		})
		g.free(dev, strided)
		g.free(dev, packed)
	}
}

// --profile on a graph replay (the copy transport's default): every
// stream's end is timed from the graph's own record nodes, after the
// iteration's start and within its time.
func TestGPUProfileWithGraph(t *testing.T) {
	if _, err := Devices(); err != nil {
		skipWithoutGPU(t, err)
	}
	rng := rand.New(rand.NewPCG(45, 46))
	for i := range 4 {
		s := schedtest.Random(t, rng)
		for _, graph := range []bool{true, false} {
			res := runGPU(t, i, s, Options{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy, Lanes: 2, Graph: graph}, Iters: 3, Profile: true})
			if res.ProfileErr != "" || len(res.StreamEnds) == 0 {
				t.Fatalf("case %d graph=%v: profile error %q, %d stream ends", i, graph, res.ProfileErr, len(res.StreamEnds))
			}
			slowest := slices.Max(res.Times)
			for _, e := range res.StreamEnds {
				if e.End < 0 || e.End > slowest {
					t.Errorf("case %d graph=%v: %s ends at %v, outside the iteration (slowest %v)", i, graph, e.Stream, e.End, slowest)
				}
			}
		}
	}
}

// BenchmarkGPUBatchCopy: the batch kernel against the one-box kernels on
// the same unpack: one box as a batch of 1 and of 64 pieces, on the whole
// GPU and on the grid left beside NCCL (docs/native.md, "Batch steps").
func BenchmarkGPUBatchCopy(b *testing.B) {
	devs, err := Devices()
	skipWithoutGPU(b, err)
	dev := devs[0].Index
	for _, c := range []struct {
		name              string
		full, start, size []int64
	}{
		{"8KiB-runs", []int64{32768, 8192}, []int64{0, 4096}, []int64{32768, 4096}}, // calibrate.BatchCase
		{"2KiB-runs", []int64{65536, 4096}, []int64{0, 2048}, []int64{65536, 1024}},
		{"16KiB-runs", []int64{16384, 16384}, []int64{0, 8192}, []int64{16384, 8192}},
		{"32KiB-runs", []int64{8192, 32768}, []int64{0, 16384}, []int64{8192, 16384}},
		{"48KiB-runs", []int64{8192, 32768}, []int64{0, 8192}, []int64{8192, 24576}},
		{"64KiB-runs", []int64{4096, 65536}, []int64{0, 32768}, []int64{4096, 32768}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var line string
			for b.Loop() {
				bytes := 2 * 2 * layout.Box{Size: c.size}.Elems()
				rate := func(ts []units.Time) float64 {
					slices.Sort(ts)
					return float64(bytes) / ts[len(ts)/2].Seconds() / 1e9
				}
				_, unpack, _, kernel, err := TimeBoxCopy(dev, c.full, c.start, c.size, 2, 10)
				if err != nil {
					b.Fatal(err)
				}
				line = fmt.Sprintf("batch %-10s one kernel (%s) %6.0f GB/s", c.name, kernel, rate(unpack))
				for _, pieces := range []int{1, 64} {
					whole, shared, err := TimeBatchCopy(dev, c.full, c.start, c.size, 2, pieces, 10)
					if err != nil {
						b.Fatal(err)
					}
					line += fmt.Sprintf("  batch of %d: %6.0f GB/s (beside NCCL %6.0f)", pieces, rate(whole), rate(shared))
				}
			}
			fmt.Fprintln(os.Stderr, line)
		})
	}
}
