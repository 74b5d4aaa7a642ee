package plan

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
)

// randomQuant makes a random layout pair quantizable: two dims or more,
// a float source, an fp8_e4m3 destination, and a scheme whose blocks the
// destination's shards hold whole or land whole (layout.LandingLayout: a
// per-channel or per-tensor block its shards cut), retrying the scheme and
// block, and giving up with ok false.
func randomQuant(rng *rand.Rand) (ir.Tensor, bool) {
	src, dst := randomLayouts(rng)
	if len(src.Shape) < 2 {
		return ir.Tensor{}, false
	}
	src.DType = []layout.DType{layout.BF16, layout.FP16, layout.FP32}[rng.IntN(3)]
	dst.DType = layout.FP8E4M3
	for range 8 {
		q := layout.Quant{Scheme: layout.QuantScheme(1 + rng.IntN(4)), Block: [2]int64{1 + rng.Int64N(4), 1 + rng.Int64N(4)}}
		if q.Scheme == layout.QuantShard {
			q.Block = [2]int64{}
			var err error
			if q, err = q.ForLayout(dst); err != nil {
				continue
			}
		}
		if _, err := layout.LandingLayout(dst, q); err == nil {
			return ir.Tensor{Name: "w.weight", Src: src, Dst: dst, Quant: q}, true
		}
	}
	return ir.Tensor{}, false
}

// Random layouts with FP8 destinations, through every route and the host
// executor: every fp8 byte and every scale equals the reference
// quantizer's, whether the route quantizes at the source, at the
// hierarchical route's entry replicas, or at the destination; the
// schedule survives its JSON form.
func TestQuantRoutesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	n := 150
	if testing.Short() {
		n = 40
	}
	sites := map[quantSite]int{}
	cuts := 0   // destinations whose shards cut their blocks
	shards := 0 // shard scales (a block a destination shard)
	for i := 0; i < n; {
		w, ok := randomQuant(rng)
		if !ok {
			continue
		}
		i++
		if layout.CheckBlocks(w.Dst, w.Quant) != nil {
			cuts++
		}
		if w.Quant.Scheme == layout.QuantShard {
			shards++
		}
		tensors := []ir.Tensor{w}
		if rng.IntN(3) == 0 { // beside a tensor that is not quantized
			s2, d2 := randomLayouts(rng)
			tensors = append(tensors, ir.Tensor{Name: "u", Src: s2, Dst: d2})
		}
		_, _, site, _, err := expand(tensors, flatRoute{})
		if err != nil {
			t.Fatal(err)
		}
		sites[site[0]]++
		if _, _, hs, _, _ := expand(tensors, hierRoute{}); hs[0] == quantAtEntry {
			sites[quantAtEntry]++
		}
		tp := randomTopology(rng)
		chunk := int64(1 + rng.IntN(64))
		var capBytes int64
		if i%3 == 0 { // staging reused under a cap (quantized copies stay outside it)
			capBytes = 1 + rng.Int64N(256)
		}
		for _, route := range Routes {
			opt := Options{Route: route, ChunkBytes: chunk, StagingCapBytes: capBytes}
			s, err := Build(tensors, tp, opt)
			var ce *StagingCapError
			if errors.As(err, &ce) {
				opt.StagingCapBytes = ce.Need
				s, err = Build(tensors, tp, opt)
			}
			if err != nil {
				t.Fatalf("case %d %s: %v\nsrc %v\ndst %v %v", i, route, err, w.Src, w.Dst, w.Quant)
			}
			runOnHost(t, s, uint64(i), fmt.Sprintf("case %d %s, src %v, dst %v %v", i, route, w.Src, w.Dst, w.Quant))
			// Every fp8 byte and scale of the destination was checked.
			var want int64
			for _, x := range s.Tensors {
				if x.Quant.On() || x.ScaleOf > 0 {
					for pos := range x.Dst.Mesh.Ranks {
						want += x.Dst.LocalBox(pos).Elems() * x.Dst.DType.Size()
					}
				}
			}
			var got int64
			for _, b := range s.Buffers {
				if b.Kind == ir.Output && (s.Tensors[b.Tensor].Quant.On() || s.Tensors[b.Tensor].ScaleOf > 0) {
					got += b.Bytes
				}
			}
			if got != want {
				t.Fatalf("case %d %s: outputs of %d fp8 and scale bytes, want %d", i, route, got, want)
			}
			if i%10 == 0 {
				var buf bytes.Buffer
				if err := ir.Encode(&buf, s); err != nil {
					t.Fatal(err)
				}
				first := buf.String()
				back, err := ir.Decode(&buf)
				if err != nil {
					t.Fatalf("case %d %s: the JSON form does not read back: %v", i, route, err)
				}
				var again bytes.Buffer
				ir.Encode(&again, back)
				if first != again.String() || !strings.Contains(first, `"version":3`) {
					a, b := first, again.String()
					k := 0
					for k < min(len(a), len(b)) && a[k] == b[k] {
						k++
					}
					t.Fatalf("case %d %s: the JSON form changes when read back, at byte %d: %.200q vs %.200q", i, route, k, a[max(k-100, 0):], b[max(k-100, 0):])
				}
			}
		}
	}
	if cuts < n/20 || shards < n/10 {
		t.Errorf("%d of %d destinations cut their blocks, %d in shard scales: the test must exercise both", cuts, n, shards)
	}
	if sites[quantAtSource] < n/5 || sites[quantAtDest] < n/5 || sites[quantAtEntry] < n/10 {
		t.Errorf("quantized at the source %d times, at the destination %d, at entry replicas (hierarchical) %d: the test must exercise each",
			sites[quantAtSource], sites[quantAtDest], sites[quantAtEntry])
	}
	t.Logf("sites: at the source %d, at the destination %d, at entry replicas (hierarchical) %d; %d destinations cut their blocks", sites[quantAtSource], sites[quantAtDest], sites[quantAtEntry], cuts)
}

// Quantizing at the source halves the bytes on the wire: the paper's layer
// to an fp8 destination (128 x 128 blocks) sends half of bf16's bytes
// plus the scales, 1/4096 of the fp8 bytes (4 bytes per 16384 elements).
func TestQuantHalvesWireBytes(t *testing.T) {
	bf := paperTensors(2)
	fp := paperTensors(2)
	fp[0].Dst.DType, fp[0].Quant = layout.FP8E4M3, layout.Quant{Scheme: layout.QuantBlock, Block: layout.DefaultBlock}
	for _, route := range []string{Flat, Hierarchical} {
		a, err := Build(bf, nvl72(2), Options{Route: route})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Build(fp, nvl72(2), Options{Route: route})
		if err != nil {
			t.Fatal(err)
		}
		na, nb := a.Stats().Bytes[ir.Net], b.Stats().Bytes[ir.Net]
		if want := na/2 + na/2/4096; nb != want {
			t.Errorf("%s: %d network bytes in fp8, want %d (half of bf16's %d, plus scales)", route, nb, want, na)
		}
		quant := 0
		for _, op := range b.Ops {
			if op.Kind == ir.Quantize {
				quant++
			}
		}
		if quant != 16 { // one per source rank: each holds whole blocks
			t.Errorf("%s: %d quantize ops, want 16 (one per source rank)", route, quant)
		}
		sol, err := Bound(route, fp, nvl72(2))
		if err != nil {
			t.Fatal(err)
		}
		solBF, _ := Bound(route, bf, nvl72(2))
		if d := float64(sol.Time)/float64(solBF.Time) - 0.5; d < 0 || d > 0.001 {
			t.Errorf("%s: SOL %v in fp8 against %v in bf16: want half (plus scales)", route, sol.Time, solBF.Time)
		}
	}
}

// A destination TP that cuts a block is refused, naming the numbers, as
// vLLM refuses it; a source that cuts blocks is quantized at the
// destination instead.
func TestQuantBlockCut(t *testing.T) {
	ts := paperTensors(2)
	ts[0].Dst.DType, ts[0].Quant = layout.FP8E4M3, layout.Quant{Scheme: layout.QuantBlock, Block: layout.DefaultBlock}
	// TP 32 over 2048 rows: 64 rows a rank.
	ts[0].Dst.Mesh = layout.Mesh{Shape: []int{1, 32}, Ranks: layout.RankRange(72, 32)}
	_, err := Build(ts, nvl72(2), Options{Route: Hierarchical})
	if !errors.Is(err, layout.ErrCutsBlock) || !strings.Contains(err.Error(), "tensor gate_proj: destination") ||
		!strings.Contains(err.Error(), "dim 1 (2048) is split by mesh axis 1 (32 ranks, S(1)) into shards of 64, and the shard [0, 64) ends at 64, inside a block of 128") {
		t.Fatalf("TP 32: %v", err)
	}
	// A source split of 2048 rows over 32 ranks, to TP 8: at the destination.
	ts = paperTensors(2)
	ts[0].Dst.DType, ts[0].Quant = layout.FP8E4M3, layout.Quant{Scheme: layout.QuantBlock, Block: layout.DefaultBlock}
	ts[0].Src.Mesh = layout.Mesh{Shape: []int{32}, Ranks: layout.RankRange(0, 32)}
	ts[0].Src.Placements = []layout.Placement{layout.S(1)}
	_, _, site, _, err := expand(ts, flatRoute{})
	if err != nil || site[0] != quantAtDest || site[1] != scaleAtDest {
		t.Fatalf("source cutting blocks: sites %v, %v", site, err)
	}
	// Not quantized, yet the dtypes differ.
	ts = paperTensors(2)
	ts[0].Dst.DType = layout.FP8E4M3
	if _, err := Build(ts, nvl72(2), Options{Route: Flat}); err == nil || !strings.Contains(err.Error(), "only a quantized destination") {
		t.Errorf("fp8 without scales: %v", err)
	}
}

// Shard scales (vLLM's online FP8, a scale a rank) at TP 2 with the
// matrix split by columns, as a row-parallel weight: each rank's shard is
// its block, so the source (split alike) quantizes and only fp8 and two
// scales cross the network, where a per-tensor scale lands the whole bf16
// matrix on both ranks (4x the bytes).
func TestQuantShardAtTP(t *testing.T) {
	shape := []int64{1024, 2048}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.S(1)}}
	dst := layout.Layout{Shape: shape, DType: layout.FP8E4M3, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{72, 73}}, Placements: []layout.Placement{layout.S(1)}}
	shard, err := layout.Quant{Scheme: layout.QuantShard}.ForLayout(dst)
	if err != nil || shard.Block != [2]int64{1024, 1024} {
		t.Fatalf("shard scales resolved to %v, %v", shard, err)
	}
	net := map[string]int64{}
	for _, q := range []layout.Quant{shard, {Scheme: layout.QuantTensor}} {
		ts := []ir.Tensor{{Name: "o_proj.weight", Src: src, Dst: dst, Quant: q}}
		s, err := Build(ts, nvl72(2), Options{Route: Flat})
		if err != nil {
			t.Fatal(err)
		}
		runOnHost(t, s, 1, q.String())
		net[q.Scheme.String()] = s.Stats().Bytes[ir.Net]
		if q.Scheme == layout.QuantShard && (s.Tensors[1].Name != "o_proj.weight_scale" || !slices.Equal(s.Tensors[1].Dst.Shape, []int64{1, 2})) {
			t.Errorf("shard scales: scale tensor %s of shape %v, want o_proj.weight_scale [1 2]", s.Tensors[1].Name, s.Tensors[1].Dst.Shape)
		}
	}
	// The IR says shard with its block; the validator and the decoder
	// refuse a block that is not the shard, or none.
	s, err := Build([]ir.Tensor{{Name: "o_proj.weight", Src: src, Dst: dst, Quant: shard}}, nvl72(2), Options{Route: Flat})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ir.Encode(&buf, s); err != nil || !strings.Contains(buf.String(), `"quant":{"scheme":"shard","block":[1024,1024]}`) {
		t.Errorf("IR: %v; want the scheme shard with its block in %.300s", err, buf.String())
	}
	if _, err := ir.Decode(strings.NewReader(strings.Replace(buf.String(), `"scheme":"shard","block":[1024,1024]`, `"scheme":"shard"`, 1))); err == nil || !strings.Contains(err.Error(), "shard scales need [rows, cols]") {
		t.Errorf("shard scales without a block: %v", err)
	}
	s.Tensors[0].Quant.Block = [2]int64{512, 1024}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "shard scales' block is the destination's shard, [1024 1024]") {
		t.Errorf("shard scales with another block: %v", err)
	}
	if want := int64(1024*2048 + 2*4); net["shard"] != want {
		t.Errorf("shard scales: %d network bytes, want the fp8 matrix and two scales, %d", net["shard"], want)
	}
	if want := int64(2 * 1024 * 2048 * 2); net["tensor"] != want {
		t.Errorf("per tensor: %d network bytes, want the bf16 matrix on both ranks, %d", net["tensor"], want)
	}
}

func TestScaleName(t *testing.T) {
	blk := layout.Quant{Scheme: layout.QuantBlock, Block: layout.DefaultBlock}
	for in, want := range map[string]string{
		"model.layers.3.mlp.experts.w13_weight[gate]": "model.layers.3.mlp.experts.w13_weight_scale_inv[gate]",
		"model.layers.0.self_attn.o_proj.weight":      "model.layers.0.self_attn.o_proj.weight_scale_inv",
		"layers.3.mlp.experts.gate_proj":              "layers.3.mlp.experts.gate_proj.weight_scale_inv",
	} {
		if got := ScaleName(in, blk); got != want {
			t.Errorf("ScaleName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ScaleName("x.weight", layout.Quant{Scheme: layout.QuantChannel}); got != "x.weight_scale" {
		t.Errorf("per channel: %q", got)
	}
}
