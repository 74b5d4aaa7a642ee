#!/usr/bin/env bash
# The executor's benchmarks on two GPUs of one host (docs/native.md,
# docs/calibration.md): build here with `make gpu-test`, copy bin/ and
# scripts/ to the GPU machine, and run this there. OUT (default ./gpu-out)
# receives the JSON and logs; the last lines are one table of every run.
# Every step has its own time limit.
set -uo pipefail
OUT=${OUT:-./gpu-out}
PORT=${PORT:-29611}
ITERS=${ITERS:-20}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
step() { echo; echo "=== $*"; }
# one NAME ARGS...: one process over both GPUs; JSON to OUT/NAME.json.
one() { local n=$1; shift; timeout 150 bin/m2n run --backend nccl --iters "$ITERS" --warmup 5 --json "$@" > "$OUT/$n.json"; }
# perproc NAME ARGS...: one process per GPU under torchrun, NCCL
# bootstrapping itself; rank 0's JSON to OUT/NAME.json.
perproc() {
	export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	local n=$1; shift
	NCCL_COMM_ID=127.0.0.1:$PORT timeout 150 torchrun --nproc-per-node 2 --no-python \
		bin/m2n run --backend nccl --iters "$ITERS" --warmup 5 --timeout 1m --json "$@" > "$OUT/$n.json" 2> "$OUT/$n.err"
	grep -v '^W\|OMP_NUM\|^\*' "$OUT/$n.err" | tail -5
	PORT=$((PORT + 1))
}
{
step "GPUs"; nvidia-smi topo -m
step "m2n topo"; timeout 30 bin/m2n topo
step "paper-2gpu"
one paper-1proc-nccl paper-2gpu
one paper-1proc-copy --transport copy paper-2gpu
perproc paper-perproc-nccl paper-2gpu
perproc paper-perproc-copy --transport copy --route flat,hierarchical paper-2gpu
step "calib-nvlink-chunks"
one chunks-1proc calib-nvlink-chunks
perproc chunks-perproc calib-nvlink-chunks
step "a group per 1 MiB chunk: the cost of one NCCL group"
one group-1proc --point "chunk=1 MiB" --wave-bytes 1MiB calib-nvlink-chunks
perproc group-perproc --point "chunk=1 MiB" --wave-bytes 1MiB calib-nvlink-chunks
step "legacy path in PyTorch, the same tensor on the same two GPUs"
timeout 200 torchrun --nproc-per-node 2 scripts/torch_legacy.py --sources 2 --tp 1 --experts 16 --iters "$ITERS" 2>&1 | grep legacy
step "the model beside the measurements"; bin/m2n sim paper-2gpu
step "every run"; python3 scripts/gpu_table.py "$OUT"/*.json
} 2>&1 | tee "$OUT/gpu-check-2.log"
