// Package kernels holds the CUDA C++ sources m2n compiles at run time with
// NVRTC for the device's architecture, embedded in the binary:
//
//   - box_copy_{long,short}_{16,8,4,2,1}: copy an N-D box between two
//     row-major arrays (pack, unpack, and box-to-box copies), with 16-, 8-,
//     4-, 2- or 1-byte accesses as alignment allows; "long" for runs of at
//     least 4 KiB (work split in segments across blocks), "short" for
//     shorter runs (every thread four vectors in flight).
//   - box_copy_stage: the same for rows that are not 16-byte aligned, a
//     warp per 4 KiB piece through shared memory, aligned 16-byte accesses
//     on both sides.
//   - box_copy_batch: many box copies in one launch, from a descriptor
//     list in device memory (the executor's batch steps); its blocks stride
//     over the units (beside NCCL kernels), box_copy_batch_ranges' take a
//     contiguous range each (on the whole GPU).
//   - fill: write each element's pattern (a splitmix64 hash of its global
//     index and tensor; the host executor's hostexec.Pattern), or its
//     complement.
//   - verify: count the elements that differ from the pattern and find the
//     first.
//   - quantize_e4m3_{1,4,8}: the IR's quantize op, a thread block per
//     quantization block: amax, scale, fp8_e4m3 bits (layout.QuantizeBlock
//     bit for bit), 1, 4 or 8 elements a thread at a time as alignment
//     allows; quantize_e4m3_b128_{bf16,fp16} for whole-width 128 x 128
//     blocks of 16-bit sources, a block read once into registers; each
//     with a _batch form that runs many quantize ops of that kernel in one
//     launch (the executor's batch steps of quantizes).
//   - quant_div_check: the fast kernels' arithmetic against IEEE
//     division, for every pair of 16-bit values.
//   - verify_quant: check an fp8 output or its scales against the
//     quantized source pattern, recomputed on the device.
//   - e4m3_convert: the conversion alone, for the check against PyTorch.
//   - flag_wait: one thread spinning on a flag in device memory until it
//     holds a value, then clearing it (pushed copies between processes).
//
// Argument structs are laid out in copy.cu; package native mirrors them.
package kernels

import _ "embed"

// Source is the CUDA C++ source of every kernel, one translation unit.
//
//go:embed copy.cu
var Source string

// Names of the kernels, as extern "C" symbols in Source.
var Names = []string{
	"box_copy_long_16", "box_copy_long_8", "box_copy_long_4", "box_copy_long_2", "box_copy_long_1",
	"box_copy_short_16", "box_copy_short_8", "box_copy_short_4", "box_copy_short_2", "box_copy_short_1",
	"box_copy_stage", "box_copy_batch", "box_copy_batch_ranges", "fill", "verify",
	"quantize_e4m3_1", "quantize_e4m3_4", "quantize_e4m3_8", "quantize_e4m3_b128_bf16", "quantize_e4m3_b128_fp16",
	"quantize_e4m3_1_batch", "quantize_e4m3_4_batch", "quantize_e4m3_8_batch",
	"quantize_e4m3_b128_bf16_batch", "quantize_e4m3_b128_fp16_batch",
	"quantize_e4m3_rows_bf16", "quantize_e4m3_rows_fp16", "quantize_e4m3_rows_bf16_batch", "quantize_e4m3_rows_fp16_batch",
	"quantize_e4m3_split_bf16_amax", "quantize_e4m3_split_fp16_amax", "quantize_e4m3_split_bf16_apply", "quantize_e4m3_split_fp16_apply",
	"verify_quant", "verify_quant_amax", "verify_quant_tiles", "e4m3_convert", "quant_div_check", "flag_wait",
}
