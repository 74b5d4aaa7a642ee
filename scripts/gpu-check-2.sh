#!/usr/bin/env bash
# The executor's benchmarks on two GPUs of one host (docs/native.md,
# docs/calibration.md): the paper layer, whole models (dense-2gpu,
# moe-2gpu) in every transport and launch mode beside PyTorch doing the
# same job, and the GPU tests. Build here with `make gpu-test`, copy bin/
# and scripts/ to the GPU machine, and run this there. OUT (default
# ./gpu-out) receives the JSON and logs; the last lines are one table of
# every run.
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
one paper-1proc-nccl --transport nccl paper-2gpu
one paper-1proc-copy --transport copy paper-2gpu
perproc paper-perproc-nccl --transport nccl paper-2gpu
perproc paper-perproc-copy --transport copy --route flat,hierarchical paper-2gpu
step "calib-nvlink-chunks"
one chunks-1proc --transport nccl calib-nvlink-chunks
perproc chunks-perproc --transport nccl calib-nvlink-chunks
step "a group per 1 MiB chunk: the cost of one NCCL group"
one group-1proc --transport nccl --point "chunk=1 MiB" --wave-bytes 1MiB calib-nvlink-chunks
perproc group-perproc --transport nccl --point "chunk=1 MiB" --wave-bytes 1MiB calib-nvlink-chunks
step "whole models (dense-2gpu: Llama-3.1-70B, 8 layers, TP2 -> TP1 x DP2; moe-2gpu: Qwen3-235B-A22B, 12 layers, EP2 -> TP1 x DP2; BF16 and FP8)"
one dense-auto dense-2gpu
one dense-nccl --transport nccl --profile dense-2gpu
one dense-copy-nograph --transport copy --graph=false --route flat,hierarchical --profile dense-2gpu
one dense-capped --transport nccl --route flat,hierarchical --staging-cap 1GiB dense-2gpu
one dense-scales-nccl --transport nccl --route flat,hierarchical dense-2gpu-scales
one dense-scales-copy --transport copy --route flat,hierarchical dense-2gpu-scales
one dense-tp2-scales-nccl --transport nccl --route flat,hierarchical dense-2gpu-tp2-scales
perproc dense-perproc-nccl --transport nccl --route flat,hierarchical,agbcast,nemo-legacy dense-2gpu
perproc dense-perproc-auto --route flat,hierarchical dense-2gpu
perproc dense-perproc-copy-profile --transport copy --graph=false --route flat --point dst=bf16 --profile dense-2gpu
one moe-auto --route flat,hierarchical moe-2gpu
one moe-nccl --transport nccl --route flat,hierarchical --profile moe-2gpu
one moe-legacy --transport nccl --route agbcast,nemo-legacy --staging-cap 8GiB moe-2gpu
perproc moe-perproc-nccl --transport nccl --route flat moe-2gpu
step "five more families, 2 layers each (families-2gpu: held out, the model not developed on them)"
one families-nccl --transport nccl families-2gpu
one families-copy --transport copy families-2gpu
perproc families-perproc-nccl --transport nccl --route flat,hierarchical families-2gpu
step "the same jobs in PyTorch (scripts/torch_refit.py), on the same GPUs"
for m in dense moe; do
	bin/m2n plan --route flat --point dst=bf16 --ir "$OUT/$m-refit.ir" "$m-2gpu" > /dev/null
	timeout 300 torchrun --nproc-per-node 2 scripts/torch_refit.py --ir "$OUT/$m-refit.ir" --iters "$ITERS" --json "$OUT/torch-$m.json" 2>&1 | grep torch_refit
	rm -f "$OUT/$m-refit.ir"
done
for m in deepseek-v2-lite mixtral-8x7b qwen3-8b qwen2.5-7b mistral-7b gemma-2-9b; do
	bin/m2n plan --route flat --point "model=$m" --ir "$OUT/$m-refit.ir" families-2gpu > /dev/null
	timeout 300 torchrun --nproc-per-node 2 scripts/torch_refit.py --ir "$OUT/$m-refit.ir" --iters "$ITERS" --json "$OUT/torch-$m.json" 2>&1 | grep torch_refit
	rm -f "$OUT/$m-refit.ir"
done
step "legacy path in PyTorch, the same tensor on the same two GPUs"
timeout 200 torchrun --nproc-per-node 2 scripts/torch_legacy.py --sources 2 --tp 1 --experts 16 --iters "$ITERS" 2>&1 | grep legacy
step "the model beside the measurements"; bin/m2n sim paper-2gpu
step "a peer killed mid-run: the survivor's exit (scripts/gpu-kill-test.sh)"; N=${KILLS:-20} timeout 900 scripts/gpu-kill-test.sh 2>&1 | tail -21
step "GPU tests (batch kernels, random schedules over both GPUs)"; timeout 300 bin/native.test -test.run 'GPULoopbackRandom|GPUMultiRandom|GPUBoxCopyKernels|GPUPaperScaled' 2>&1 | tail -3
step "every run"; python3 scripts/gpu_table.py "$OUT"/*.json
} 2>&1 | tee "$OUT/gpu-check-2.log"
