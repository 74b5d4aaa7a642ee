#!/usr/bin/env bash
# NCCL settings against the paper layer on two GPUs, and the loopback NCCL
# transport's communicator count on one (docs/native.md): build here with
# `make gpu-test`, copy bin/ and scripts/ to the GPU machine, run this there.
# OUT (default ./gpu-out) receives the JSON; the last lines are one table.
set -uo pipefail
OUT=${OUT:-./gpu-out}
PORT=${PORT:-29711}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
run1() { local n=$1; shift; env "$@" timeout 100 bin/m2n run --backend nccl --iters 20 --warmup 5 --route flat,hierarchical --json paper-2gpu > "$OUT/$n.json"; }
runp() {
	local n=$1; shift
	env "$@" NCCL_COMM_ID=127.0.0.1:$PORT timeout 100 torchrun --nproc-per-node 2 --no-python \
		bin/m2n run --backend nccl --iters 20 --warmup 5 --timeout 1m --route flat,hierarchical --json paper-2gpu > "$OUT/$n.json" 2>/dev/null
	PORT=$((PORT + 1))
}
run1 env-1proc-default M2N_X=0
run1 env-1proc-cemem NCCL_P2P_USE_CUDA_MEMCPY=1
run1 env-1proc-chunk2m NCCL_P2P_NVL_CHUNKSIZE=2097152
run1 env-1proc-ch32 NCCL_MIN_P2P_NCHANNELS=32 NCCL_MAX_P2P_NCHANNELS=32
runp env-perproc-default M2N_X=0
runp env-perproc-cemem NCCL_P2P_USE_CUDA_MEMCPY=1
runp env-perproc-chunk2m NCCL_P2P_NVL_CHUNKSIZE=2097152
for c in 1 4 8 16; do
	M2N_LOOPBACK_COMMS=$c timeout 150 bin/m2n run --scale 0.0625 --point rho=2 --transport nccl --graph=false --json paper-ffn-moe > "$OUT/loop-nccl-comms$c.json"
done
timeout 150 bin/m2n run --scale 0.0625 --point rho=2 --json paper-ffn-moe > "$OUT/loop-copy.json"
python3 scripts/gpu_table.py "$OUT"/*.json
