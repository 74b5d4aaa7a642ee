#!/usr/bin/env bash
# What a wait across streams costs the device (docs/calibration.md, "Sources
# outside the L2", the lead at its end): chains of device ops, each waiting
# for the one before, on one stream against alternating between two, in a
# CUDA graph, one GPU in loopback. chainK-NxS: N local copies of S bytes on
# rank 0, each after the last (the planner orders a rank's copies); altK:
# the same copies alternating between ranks 0 and 1 (a lane each,
# --lanes 2), each made to wait for the one before (its deps edited into
# the IR). The difference per copy is the cross-stream wait; the model
# (embedded preset) charges none. xfer pairs do the same with device copies
# between ranks (0 -> 1 against 0 -> 1 and 2 -> 3 alternating). Each op
# its own kernel or copy (M2N_NO_BATCH=1; the table's model column batches
# a rank's local copies as the executor would without it). Build here with `make
# gpu-test`, copy bin/ and scripts/ to the GPU machine and run this there;
# OUT (default ./gpu-out) gets the IR and JSON; the last lines are a table.
set -uo pipefail
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT/sc"
python3 scripts/copy_scenarios.py wait "$OUT/sc" || exit 1
chain() { # make each op (a send for a transfer) wait for the op before it
	python3 - "$1" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
heads = [o for o in d["ops"] if o["kind"] in ("copy", "send")]
for prev, o in zip(heads, heads[1:]):
    want = prev["match"] if prev["kind"] == "send" else prev["id"]
    o["deps"] = sorted(set(o.get("deps", [])) | {want})
json.dump(d, open(p, "w"))
PY
}
for f in "$OUT"/sc/*.toml; do
	n=$(basename "$f" .toml)
	bin/m2n plan --coalesce none --ir "$OUT/$n.ir.json" "$f" > /dev/null || { echo "$n: plan failed"; continue; }
	chain "$OUT/$n.ir.json"
	M2N_NO_BATCH=1 timeout 100 bin/m2n run --ir "$OUT/$n.ir.json" --topology hgx-h200-measured --lanes 2 --coalesce none \
		--iters 10 --warmup 3 --json > "$OUT/$n.json" 2> "$OUT/$n.err" || echo "$n failed"
done
python3 scripts/gpu_table.py "$OUT"/*.json
