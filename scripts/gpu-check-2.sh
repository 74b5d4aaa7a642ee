#!/usr/bin/env bash
# Calibrates NVLink and runs the routes over NCCL on two GPUs of one host
# (docs/calibration.md): build here with `make gpu-test`, copy bin/ and
# scripts/ to the GPU machine, and run this there. OUT (default
# ./gpu-out) receives the logs and JSON. Every step has its own time limit.
set -uo pipefail
OUT=${OUT:-./gpu-out}
PORT=${PORT:-29611}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
step() { echo; echo "=== $*"; }
# perproc runs m2n once per GPU under torchrun, NCCL bootstrapping itself.
perproc() { NCCL_COMM_ID=127.0.0.1:$PORT timeout 150 torchrun --nproc-per-node 2 --no-python bin/m2n "$@" 2>&1 | grep -v '^W\|OMP_NUM\|^\*'; PORT=$((PORT + 1)); }
{
step "GPUs"; nvidia-smi topo -m
step "m2n topo"; timeout 30 bin/m2n topo
for s in calib-nvlink-pair calib-nvlink-all calib-nvlink-chunks paper-2gpu; do
	step "$s, one process"
	timeout 120 bin/m2n run --backend nccl --iters 10 --warmup 3 --json "$s" > "$OUT/$s.json"
	timeout 120 bin/m2n run --backend nccl --iters 10 --warmup 3 "$s"
	step "$s, one process per GPU"
	perproc run --backend nccl --iters 10 --warmup 3 --timeout 1m "$s"
done
step "legacy path in PyTorch, the same tensor on the same two GPUs"
timeout 200 torchrun --nproc-per-node 2 scripts/torch_legacy.py --sources 2 --tp 1 --experts 16 --iters 10 2>&1 | grep legacy
step "the model beside the measurements"; bin/m2n sim paper-2gpu
} 2>&1 | tee "$OUT/gpu-check-2.log"
