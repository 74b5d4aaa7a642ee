#!/usr/bin/env bash
# Device ops on one GPU whose sources the L2 holds or not (docs/calibration.md,
# "Sources outside the L2"): scenarios generated here (TOML under OUT/sc) of
# one tensor a copy, run with `m2n run` in loopback (--coalesce none), the
# embedded preset's model beside. xS-nN: N device copies of S bytes from
# rank 0 to rank 1 on one lane (the iteration's bytes within the 60 MiB L2
# of an H200 or far beyond it); -L8: the copies spread over 8 pairs of
# ranks, a lane each; sS-nN: the same as local copies on rank 0, each its
# own kernel (M2N_NO_BATCH=1; the model's column assumes batches there).
# Build here with `make gpu-test`, copy bin/ and scripts/ to the GPU
# machine and run this there; OUT (default ./gpu-out) gets the JSON; the
# last lines are one table.
set -uo pipefail
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT/sc"
python3 scripts/copy_scenarios.py l2 "$OUT/sc" || exit 1
for f in "$OUT"/sc/x*.toml; do
	n=$(basename "$f" .toml); l=1
	case $n in *L8) l=8 ;; esac
	timeout 100 bin/m2n run --lanes $l --coalesce none --iters 10 --warmup 3 --json "$f" > "$OUT/$n.json" 2> "$OUT/$n.err" || echo "$n failed"
done
for f in "$OUT"/sc/s*.toml; do
	n=$(basename "$f" .toml)
	M2N_NO_BATCH=1 timeout 100 bin/m2n run --lanes 1 --coalesce none --iters 10 --warmup 3 --json "$f" > "$OUT/$n.json" 2> "$OUT/$n.err" || echo "$n failed"
done
python3 scripts/gpu_table.py "$OUT"/*.json
