#!/usr/bin/env bash
# Runs m2n's GPU checks on a GPU machine that has no Go: build here with
# `make gpu-test` (bin/m2n and bin/native.test), copy bin/ and scripts/ there,
# and run this. OUT (default ./gpu-out) receives the logs.
set -uo pipefail
OUT=${OUT:-./gpu-out}
SCALE=${SCALE:-0.0625}
mkdir -p "$OUT"
step() { echo; echo "=== $*"; }
{
step "GPUs"; nvidia-smi -L
step "m2n topo"; bin/m2n topo
step "native tests"; timeout 200 bin/native.test -test.v -test.run 'GPU|Library' 2>&1 | grep -v '^=== RUN'
step "the graph-capture race: the paper case 50 times"; timeout 100 bin/native.test -test.run GPUPaperScaled -test.count 50 2>&1 | tail -1
step "a whole-model refit, shrunk: qwen3-235b-128 at scale 0.002, every route, staging capped at 256 MiB a rank"
timeout 300 bin/m2n run --scale 0.002 --iters 3 --staging-cap 256MiB --json qwen3-235b-128 > "$OUT/qwen3-capped.json"
step "paper scenario, loopback, scale $SCALE"
timeout 150 bin/m2n run --scale "$SCALE" --json paper-ffn-moe > "$OUT/loop-copy.json"
step "paper scenario, loopback over NCCL self send/recv, rho=2"
timeout 150 bin/m2n run --scale "$SCALE" --point rho=2 --transport nccl --json paper-ffn-moe > "$OUT/loop-nccl.json"
step "fp8 scale layouts (dense-2gpu-scales: block, per channel, per tensor), loopback"
timeout 300 bin/m2n run --iters 5 --warmup 2 --json dense-2gpu-scales > "$OUT/loop-scales.json"
step "the same at generator TP2 (row-parallel shards cut per-channel and per-tensor blocks; shard scales a rank each), loopback"
timeout 300 bin/m2n run --iters 5 --warmup 2 --json dense-2gpu-tp2-scales > "$OUT/loop-tp2-scales.json"
step "six more families, 2 layers each (families-2gpu), loopback, copies and NCCL"
timeout 200 bin/m2n run --iters 5 --warmup 2 --json families-2gpu > "$OUT/families-copy.json"
timeout 200 bin/m2n run --transport nccl --iters 5 --warmup 2 --json families-2gpu > "$OUT/families-nccl.json"
step "kernel throughput (m2n)"; timeout 150 bin/native.test -test.run '^$' -test.bench GPU -test.benchtime 1x 2>&1 | grep '^box\|^geometry\|^batch'
step "kernel throughput (PyTorch)"; python3 scripts/torch_pack.py
step "legacy path in PyTorch (one GPU: a smoke test of the script)"
torchrun --nproc-per-node 1 scripts/torch_legacy.py --sources 1 --tp 1 --experts 16 2>&1 | tail -2
step "every run"; python3 scripts/gpu_table.py "$OUT"/*.json
} 2>&1 | tee "$OUT/log.txt"
