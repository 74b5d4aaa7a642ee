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
step "native tests"; bin/native.test -test.v -test.run 'GPU|Library' 2>&1 | grep -v '^=== RUN'
step "kernel throughput (m2n)"; bin/native.test -test.run '^$' -test.bench GPU -test.benchtime 1x 2>&1 | grep '^box\|^geometry'
step "kernel throughput (PyTorch)"; python3 scripts/torch_pack.py
step "paper scenario, loopback, scale $SCALE"
bin/m2n run --scale "$SCALE" --json paper-ffn-moe > "$OUT/run-copy.json" && bin/m2n run --scale "$SCALE" --iters 3 --point rho=2 paper-ffn-moe
step "a whole-model refit, shrunk: qwen3-235b-128 at scale 0.002"
bin/m2n run --scale 0.002 --iters 3 --route hierarchical,nemo-legacy qwen3-235b-128
step "legacy path in PyTorch (one GPU: a smoke test of the script)"
torchrun --nproc-per-node 1 scripts/torch_legacy.py --sources 1 --tp 1 --experts 16 2>&1 | tail -2
step "paper scenario, loopback over NCCL self send/recv, rho=2"
bin/m2n run --scale "$SCALE" --transport nccl --graph=false --point rho=2 --json paper-ffn-moe > "$OUT/run-nccl.json"; tail -c 2000 "$OUT/run-nccl.json"
} 2>&1 | tee "$OUT/log.txt"
