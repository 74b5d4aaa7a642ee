package ir_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
)

// TestDocuments reads the hand-written schedules of testdata/, one rule of
// docs/ir.md each, without the planner: each valid one decodes, validates
// and runs exactly on the host executor; each other one fails with its own
// error.
func TestDocuments(t *testing.T) {
	want := map[string]string{
		"valid-minimal.json":                         "", // deps omitted
		"valid-empty-deps.json":                      "", // "deps": []
		"valid-staging-unpack.json":                  "", // raw staging: no tensor, no box
		"valid-arena-reuse.json":                     "", // a slot rewritten after its reader
		"valid-rewrite-own-buffer.json":              "", // the same, in a buffer of its own
		"valid-copy-box-to-box.json":                 "",
		"valid-fifo-order.json":                      "",
		"valid-cross-rank-dependency.json":           "", // Validate allows it; CheckRankLocal does not
		"reuse-without-dependency.json":              "op 4 (recv on rank 1): overwrites bytes [0, 16) of buffer 2 (staging, rank 1) that op 2 (unpack on rank 1) reads, which does not happen before it",
		"rewrite-own-buffer-without-dependency.json": "op 4 (recv on rank 1): overwrites bytes [0, 16) of buffer 2 (staging, rank 1) that op 2 (unpack on rank 1) reads",
		"arena-in-version-1.json":                    "buffers[2].arena_offset: a version 2 field in a version 1 document",
		"arena-on-output.json":                       "buffer 1: arena_offset on an output buffer: only staging shares an arena",
		"read-through-another-buffer.json":           "op 2 (copy on rank 1): reads bytes [0, 32) of buffer 2 that op 1 last wrote through buffer 3",
		"copy-range-to-box.json":                     "op 2 (copy on rank 1): copy joins two byte ranges or two boxes",
		"copy-boxes-differ-in-shape.json":            "op 0 (copy on rank 1): copy boxes differ in size: [1 4] and [2 2]",
		"two-outputs-one-rank.json":                  "buffer 2: a second output of x on rank 1",
		"tensor-out-of-range.json":                   "buffers[1].tensor = 1: not an index of tensors (0 to 0)",
		"tensor-negative.json":                       "buffers[2].tensor = -1: not an index of tensors (0 to 0)",
		"out-of-fifo-order.json":                     "sends from rank 0 to rank 1 and the recvs there do not match in order",
		"region-without-offset.json":                 "ops[0].src: give offset (a byte range) or start and size (a box)",
		"unknown-field.json":                         `unknown field "color"`,
		"version-4.json":                             "version 4, but this m2n reads versions 1 to 3",
		"valid-quantize.json":                        "", // quantized at the source, fp8 and scales sent
		"quant-in-version-2.json":                    "tensors[0]: dst_dtype, quant or scale_of: a version 3 field in a version 2 document",
		"quant-dst-cuts-block.json":                  "tensors[0] (w) dst: a shard boundary cuts a quantization block: dim 1 (4) is split by mesh axis 0 (2 ranks, S(1)) into shards of 2, and the shard [0, 2) ends at 2, inside a block of 3",
		"quantize-cuts-block.json":                   "op 0 (quantize on rank 0): quantizes box [0:3, 1:4] of w, which cuts its blocks of 2 in dim 1 ([1, 4))",
		"quantize-without-dependency.json":           "op 1 (send on rank 0): reads bytes [0, 12) of buffer 1 written by op 0 (quantize on rank 0), which does not happen before it",
		"output-partly-written.json":                 "buffer 1 (output of x on rank 1): bytes from 16 on are never written",
		"reads-unwritten-staging.json":               "op 0 (unpack on rank 1): reads bytes [0, 32) of buffer 2 that nothing writes",
		"dependency-not-before.json":                 "ops[0]: dependency 1 does not precede it",
		"staging-over-1-tib.json":                    "buffers[2].bytes = 4611686018427387904: more than any GPU holds (at most 1099511627776 bytes, 1 TiB, per buffer)",
		"rank-over-16-tib.json":                      "rank 1: its buffers take at least 17592186044480 bytes: more than any GPU holds (at most 17592186044416 bytes, 16 TiB, per rank)",
		"arena-over-1-tib.json":                      "buffer 2 (staging on rank 1): 32 bytes at arena offset 1099511627776: more than any GPU holds",
		"unpack-before-its-recv.json":                "op 2 (unpack on rank 1): reads bytes [0, 32) of buffer 2 written by op 1 (recv on rank 1), which does not happen before it",
	}
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) != len(want) {
		t.Errorf("testdata holds %d documents, the table %d", len(files), len(want))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			w, ok := want[name]
			if !ok {
				t.Fatalf("%s is not in the table", name)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s, err := ir.Decode(strings.NewReader(string(data)))
			if w != "" {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("Decode() = %v, want an error containing %q", err, w)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode() = %v", err)
			}
			res, err := hostexec.Run(s, hostexec.Options{Seed: 1})
			if err != nil || res.Wrong != 0 {
				t.Fatalf("host executor: %+v, %v", res, err)
			}
			local := s.CheckRankLocal()
			if cross := name == "valid-cross-rank-dependency.json"; (local != nil) != cross {
				t.Errorf("CheckRankLocal() = %v", local)
			}
		})
	}
}
