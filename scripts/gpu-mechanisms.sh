#!/usr/bin/env bash
# The mechanisms the executor model misses, measured apart on two GPUs
# (docs/calibration.md, "Three calibrations of 2026-12-01 09:46 UTC"):
# NCCL both ways by size and by send/recvs a group (scripts/mechanisms/),
# NCCL beside a local copy kernel on 16, 64 or every block
# (M2N_LOCAL_COPY_BLOCKS), batches beside NCCL on 32 (the default), 64 or
# 128 blocks (M2N_BATCH_BLOCKS), and moe-2gpu's FP8 copies per GPU against
# one process. Every run is profiled: the JSON has each stream's end, each
# NCCL group's end and the model's. Build here with `make gpu-test`, copy
# bin/ and scripts/ to the GPU machine, run this there; OUT (default
# ./gpu-out) gets the JSON; the last lines are one table of every run.
set -uo pipefail
OUT=${OUT:-./gpu-out}
PORT=${PORT:-29900}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
M=scripts/mechanisms
one() { local n=$1; shift; timeout 120 bin/m2n run --backend nccl --iters 10 --warmup 3 --profile --json "$@" > "$OUT/$n.json" 2> "$OUT/$n.err"; }
perproc() {
	local n=$1; shift
	NCCL_COMM_ID=127.0.0.1:$PORT timeout 150 torchrun --nproc-per-node 2 --no-python \
		bin/m2n run --backend nccl --iters 10 --warmup 3 --timeout 1m --profile --json "$@" > "$OUT/$n.json" 2> "$OUT/$n.err"
	PORT=$((PORT + 1))
}
{
for f in xchg xchg1g many many16 beside box; do
	one "$f" --transport nccl "$M/$f.toml"
	one "$f-copy" --transport copy "$M/$f.toml"
done
for b in 16 64 -1; do
	M2N_LOCAL_COPY_BLOCKS=$b one "lcb$b-beside" --transport nccl "$M/beside.toml"
	M2N_LOCAL_COPY_BLOCKS=$b one "lcb$b-paper" --transport nccl paper-2gpu
	M2N_LOCAL_COPY_BLOCKS=$b one "lcb$b-dense" --transport nccl --route flat,agbcast,nemo-legacy dense-2gpu
done
for b in 64 128; do
	M2N_BATCH_BLOCKS=$b one "bb$b-dense" --transport nccl --route flat dense-2gpu
	M2N_BATCH_BLOCKS=$b one "bb$b-box" --transport nccl "$M/box.toml"
done
one moe8-1proc-copy --transport copy --route flat --point dst=fp8_e4m3 moe-2gpu
perproc moe8-perproc-copy --transport copy --route flat --point dst=fp8_e4m3 moe-2gpu
python3 scripts/gpu_table.py "$OUT"/*.json
} 2>&1 | tee "$OUT/gpu-mechanisms.log"
