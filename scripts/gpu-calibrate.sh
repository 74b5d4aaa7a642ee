#!/usr/bin/env bash
# Calibrate the executor model on a two-GPU machine, then predict held-out
# runs with it (docs/calibration.md): build here with `make gpu-test`, copy
# bin/ and scripts/ to the GPU machine, and run this there. OUT (default
# ./gpu-out) receives the preset, the JSON and the logs; the last lines are
# one table: every (scenario, point, route, launch mode) measured beside the
# model and its error. Fitted: the calibrate benches only. Predicted without
# refitting: everything after them, from the first preset alone. CAL
# (default 3) calibrations run back to back, each into its own preset
# (OUT/hgx-h200-measured-K.toml), so that `m2n sim --model` with each
# predicts the same held-out runs and shows the presets' spread
# (docs/calibration.md says how). HELDOUT=0 stops after the calibrations
# (about 2 minutes on 2 x H200), for a short device window: copy an earlier
# call's records beside the presets (same executor build) and run
# scripts/heldout_table.py there. On a machine with one GPU (NGPU, default
# the GPUs CUDA_VISIBLE_DEVICES or nvidia-smi lists) each calibration
# measures what one GPU can (copies, packs, quantize kernels, local
# latency) into the embedded two-GPU preset
# (model/scenario/presets/hgx-h200-measured.toml: copy it there too),
# keeping its pair constants, and only the loopback runs are held out,
# measured once with preset 1.
set -uo pipefail
OUT=${OUT:-./gpu-out}
PORT=${PORT:-29811}
ITERS=${ITERS:-20}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
CAL=${CAL:-3}
P="$OUT/hgx-h200-measured-1.toml"
step() { echo; echo "=== $*"; }
torchrun2() {
	export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	NCCL_COMM_ID=127.0.0.1:$PORT timeout 300 torchrun --nproc-per-node 2 --no-python "$@"
	PORT=$((PORT + 1))
}
one() { local n=$1; shift; timeout 300 bin/m2n run --backend nccl --iters "$ITERS" --warmup 5 --json --model "$P" "$@" > "$OUT/$n.json"; }
perproc() { local n=$1; shift; torchrun2 bin/m2n run --backend nccl --iters "$ITERS" --warmup 5 --timeout 1m --json --model "$P" "$@" > "$OUT/$n.json" 2> "$OUT/$n.err"; }
loop() { local n=$1; shift; timeout 400 bin/m2n run --iters "$ITERS" --warmup 3 --json --model "$P" "$@" > "$OUT/$n.json"; }
if [ -z "${NGPU:-}" ]; then
	if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
		NGPU=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
	else
		NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	fi
fi
if [ "$NGPU" -lt 1 ]; then
	echo "gpu-calibrate.sh: no GPU found (nvidia-smi -L lists none; set NGPU to say how many)" >&2
	exit 1
fi
EMBEDDED=model/scenario/presets/hgx-h200-measured.toml
if [ "$NGPU" -lt 2 ] && [ ! -f "$EMBEDDED" ]; then
	echo "gpu-calibrate.sh: one GPU calibrates into $EMBEDDED, which is not here: copy it beside bin/ and scripts/" >&2
	exit 1
fi
# The loopback runs, held out on any machine (every rank on one GPU).
loopbacks() {
	step "held out: the paper layer in loopback (scale 0.0625, rho=2)"
	loop loop-paper-copy --scale 0.0625 --point rho=2 paper-ffn-moe
	loop loop-paper-nccl --transport nccl --scale 0.0625 --point rho=2 paper-ffn-moe
	step "held out: qwen3-235b-128 in loopback (scale 0.002, staging cap 256 MiB)"
	ITERS=5 loop loop-qwen3 --scale 0.002 --staging-cap 256MiB --route agbcast,hierarchical,nemo-legacy qwen3-235b-128
	step "held out: FP8 by scale layout in loopback (dense-2gpu-scales; dense-2gpu-tp2-scales)"
	ITERS=5 loop loop-scales dense-2gpu-scales
	ITERS=5 loop loop-tp2-scales dense-2gpu-tp2-scales
	step "held out: FP8 on the wire (fp8-2gpu) in loopback"
	loop loop-fp8 fp8-2gpu
	step "held out: six more model families (families-2gpu, two layers each) in loopback"
	ITERS=5 loop loop-families-copy families-2gpu
	ITERS=5 loop loop-families-nccl --transport nccl families-2gpu
}
{
for k in $(seq 1 "$CAL"); do
	if [ "$NGPU" -lt 2 ]; then
		step "calibration $k of $CAL, one GPU: into the embedded preset"
		time bin/m2n calibrate --into "$EMBEDDED" --samples "$OUT/samples-$k-one-gpu.json" --out "$OUT/hgx-h200-measured-$k.toml"
		continue
	fi
	step "calibration $k of $CAL, one process"
	time bin/m2n calibrate --samples "$OUT/samples-$k-one-process.json" --out "$OUT/hgx-h200-measured-$k.toml"
	step "calibration $k of $CAL, one process per GPU (adds per_gpu)"
	time torchrun2 bin/m2n calibrate --samples "$OUT/samples-$k-per-gpu.json" --into "$OUT/hgx-h200-measured-$k.toml" --out "$OUT/hgx-h200-measured-$k.toml"
done
cat "$P"
if [ "${HELDOUT:-1}" = 0 ]; then
	step "HELDOUT=0: the calibrations only (python3 scripts/heldout_table.py predicts the records of an earlier call with these presets)"
	exit 0
fi
if [ "$NGPU" -ge 2 ]; then
	step "held out: paper-2gpu, two GPUs"
	one paper-1proc-nccl --transport nccl paper-2gpu
	perproc paper-perproc-nccl --transport nccl paper-2gpu
	one paper-1proc-copy --transport copy paper-2gpu
	perproc paper-perproc-copy --transport copy --route flat,hierarchical paper-2gpu
	step "held out: whole models (dense-2gpu, moe-2gpu; BF16 and FP8), both launch modes and transports"
	one dense-1proc-nccl --transport nccl dense-2gpu
	one dense-1proc-copy --transport copy dense-2gpu
	perproc dense-perproc-nccl --transport nccl --route flat,hierarchical,agbcast,nemo-legacy dense-2gpu
	perproc dense-perproc-copy --transport copy --route flat,hierarchical dense-2gpu
	one moe-1proc-nccl --transport nccl --route flat,hierarchical moe-2gpu
	one moe-1proc-legacy --transport nccl --route agbcast,nemo-legacy --staging-cap 8GiB moe-2gpu
	one moe-1proc-copy --transport copy --route flat,hierarchical moe-2gpu
	perproc moe-perproc-nccl --transport nccl --route flat,hierarchical moe-2gpu
	perproc moe-perproc-copy --transport copy --route flat,hierarchical moe-2gpu
	step "held out: FP8 by scale layout (dense-2gpu-scales: block, per channel, per tensor), two GPUs"
	one scales-1proc-nccl --transport nccl --route flat,hierarchical dense-2gpu-scales
	one scales-1proc-copy --transport copy --route flat,hierarchical dense-2gpu-scales
	step "held out: FP8 on the wire (fp8-2gpu), two GPUs"
	one fp8-1proc-auto fp8-2gpu
	one fp8-1proc-nccl --transport nccl fp8-2gpu
	step "held out: six more model families (families-2gpu), two GPUs"
	one families-1proc-nccl --transport nccl families-2gpu
	one families-1proc-copy --transport copy families-2gpu
	perproc families-perproc-nccl --transport nccl --route flat,hierarchical families-2gpu
fi
loopbacks
step "every run"; python3 scripts/gpu_table.py "$OUT"/*.json
step "every preset's prediction (also here, without a GPU: python3 scripts/heldout_table.py OUT)"; python3 scripts/heldout_table.py "$OUT"
if [ "$NGPU" -lt 2 ]; then
	step "what one GPU measured, by preset"
	for k in $(seq 1 "$CAL"); do
		echo "preset $k: $(grep -h '^memory\|^latency_local\|^pack_\|^quantize\|^batch_shared' "$OUT/hgx-h200-measured-$k.toml" | tr '\n' ' ')"
		echo "  one process: $(sed -n '/one_process\]/,/per_gpu\]/p' "$OUT/hgx-h200-measured-$k.toml" | grep 'host_launch\|host_event' | tr '\n' ' ')"
	done
fi
} 2>&1 | tee "$OUT/gpu-calibrate.log"
