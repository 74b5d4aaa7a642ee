#!/usr/bin/env bash
# CUDA IPC per GPU (docs/native.md): paper-2gpu in both launch modes and
# transports, the whole models per GPU over copies (pulled where the
# receivers can, pushed with flags otherwise) and auto, a peer killed
# during a pushed run, and the GPU tests; one table last. Build here with
# `make gpu-test`; run on the GPU machine from the folder holding bin/ and
# scripts/. OUT (default ./gpu-out) receives the JSON and the log.
set -uo pipefail
O=${OUT:-./gpu-out}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
P=${PORT:-29700}
one() { local n=$1; shift; timeout 150 bin/m2n run --backend nccl --iters 20 --warmup 5 --json "$@" > "$O/$n.json" 2>"$O/$n.err"; }
per() { local n=$1; shift; NCCL_COMM_ID=127.0.0.1:$P timeout 200 torchrun --nproc-per-node 2 --no-python bin/m2n run --backend nccl --iters 20 --warmup 5 --timeout 1m --json "$@" > "$O/$n.json" 2> "$O/$n.err"; grep -v '^W1\|OMP_NUM\|^\*' "$O/$n.err" | tail -2; P=$((P+1)); }
{
one paper-1p-nccl --transport nccl paper-2gpu
one paper-1p-copy --transport copy paper-2gpu
per paper-pg-nccl --transport nccl paper-2gpu
per paper-pg-copy --transport copy paper-2gpu
per dense-pg-copy --transport copy dense-2gpu
per dense-pg-auto --route flat dense-2gpu
per moe-pg-copy --transport copy --route flat,agbcast --staging-cap 8GiB moe-2gpu
echo "=== kill"; TRANSPORT=copy ROUTE=agbcast N=4 TIMEOUT=10 timeout 200 scripts/gpu-kill-test.sh 2>&1 | tail -5
echo "=== gpu tests"; timeout 240 bin/native.test -test.run 'GPULoopbackRandom|GPUMultiRandom|GPUBoxCopyKernels' 2>&1 | tail -3
echo "=== table"; python3 scripts/gpu_table.py $O/*.json
} 2>&1 | tee $O/final.log
