#!/usr/bin/env bash
# Device copies on one GPU spread over 1, 2, 4 and 8 lanes (docs/calibration.md,
# "Lanes and waits across them"): the same 896 MiB copied an iteration in
# copies of 1, 3.5, 16 and 56 MiB between 8 pairs of ranks (a pair a lane,
# round robin), each run with --lanes 1, 2, 4 and 8, the embedded preset's
# model beside; and u3.5m-n192, 4 lanes of which two carry twice the copies
# (--profile: when each lane ends). The paper layer's flat and hierarchical
# copies (scale 0.0625, rho=2) and flat with hierarchical's waits across
# lanes grafted on (scripts/graft_waits.py), --profile. Then the lanes' waits:
# scripts/torch_lane_waits.py (PyTorch, a CUDA graph of device copies on
# 4 streams like the executor's, waits across streams added one way or the
# other). Build here with `make gpu-test`, copy bin/ and scripts/ to the
# GPU machine and run this there; OUT (default ./gpu-out) gets the JSON;
# the last lines are the tables.
set -uo pipefail
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT/sc"
python3 scripts/copy_scenarios.py lanes "$OUT/sc" || exit 1
for f in "$OUT"/sc/c*.toml; do
	n=$(basename "$f" .toml)
	for l in 1 2 4 8; do
		timeout 100 bin/m2n run --lanes $l --coalesce none --iters 10 --warmup 3 --json "$f" > "$OUT/$n-L$l.json" 2> "$OUT/$n-L$l.err" || echo "$n L$l failed"
	done
done
timeout 100 bin/m2n run --lanes 4 --profile --coalesce none --iters 10 --warmup 3 --json "$OUT/sc/u3.5m-n192.toml" > "$OUT/u3.5m-n192-L4.json" 2> "$OUT/u3.5m-n192-L4.err" || echo "u3.5m-n192 failed"
for r in flat hierarchical; do
	bin/m2n plan --scale 0.0625 --point rho=2 --route $r --ir "$OUT/sc/$r.ir.json" paper-ffn-moe > /dev/null || echo "plan $r failed"
done
python3 scripts/graft_waits.py "$OUT/sc/flat.ir.json" "$OUT/sc/hierarchical.ir.json" "$OUT/sc"
for n in flat hierarchical flat-graft flat-w23 flat-w01; do
	timeout 100 bin/m2n run --ir "$OUT/sc/$n.ir.json" --topology hgx-h200-measured --lanes 4 --profile --iters 10 --warmup 3 --json > "$OUT/paper-$n.json" 2> "$OUT/paper-$n.err" || echo "paper $n failed"
done
python3 scripts/gpu_table.py "$OUT"/*.json
python3 - "$OUT" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(p)).get("records", []):
        if r.get("stream_ends"):
            print(os.path.basename(p)[:-5], r["route"], "lane ends (us):", [round(s["end_s"] * 1e6, 1) for s in r["stream_ends"]])
PY
timeout 300 python3 scripts/torch_lane_waits.py "$OUT/lane-waits.json"
