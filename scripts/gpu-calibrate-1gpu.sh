#!/usr/bin/env bash
# Three one-GPU calibrations in a row, each into the embedded two-GPU preset
# (the pair's constants kept), each predicting the loopback held-out runs
# (docs/calibration.md, "Three one-GPU calibrations in a row"): build here
# with `make gpu-test`, copy bin/, scripts/ and model/scenario/presets/ to
# the GPU machine, and run this there. T (default ./gpu-out-1gpu) receives
# the presets, samples, JSON and logs; the last lines are one table: each
# loopback run's modeled time under the three presets, their spread, the
# measured times and the errors, then the host constants of each preset.
set -u
T=${T:-./gpu-out-1gpu}
mkdir -p "$T"
for i in 1 2 3; do
  s=$(date +%s.%N)
  timeout 120 bin/m2n calibrate --into model/scenario/presets/hgx-h200-measured.toml --out $T/p$i.toml --samples $T/s$i.json > $T/cal$i.log 2>&1 || echo "calibrate $i failed"
  e=$(date +%s.%N); python3 -c "print(\"calibrate $i: %.1f s\" % ($e - $s))"
  timeout 150 bin/m2n run --model $T/p$i.toml --scale 0.0625 --json paper-ffn-moe > $T/paper-$i.json 2> $T/paper-$i.err || echo "paper $i failed"
  timeout 100 bin/m2n run --model $T/p$i.toml --scale 0.0625 --point rho=2 --transport nccl --json paper-ffn-moe > $T/nccl-$i.json 2> $T/nccl-$i.err || echo "nccl $i failed"
  timeout 200 bin/m2n run --model $T/p$i.toml --scale 0.002 --iters 3 --staging-cap 256MiB --json qwen3-235b-128 > $T/qwen3-$i.json 2> $T/qwen3-$i.err || echo "qwen3 $i failed"
done
python3 - $T <<'PY'
import json, sys, collections
T = sys.argv[1]
rows = collections.OrderedDict()
for i in (1, 2, 3):
    for k in ("paper", "nccl", "qwen3"):
        try:
            d = json.load(open(f"{T}/{k}-{i}.json"))
        except Exception as e:
            print(k, i, "unreadable", e); continue
        for r in d["records"]:
            key = (k, json.dumps(r.get("point")), r["route"], r.get("transport"))
            rows.setdefault(key, []).append((r.get("modeled_s") or 0, r.get("measured_s") or 0))
print("run point route transport | modeled 1/2/3 ms | spread | measured 1/2/3 ms | errors")
for key, v in rows.items():
    m = [x[0] for x in v]; me = [x[1] for x in v]
    spread = (max(m) / min(m) - 1) if min(m) > 0 else float("nan")
    errs = " ".join("%+.1f%%" % (100 * (a / b - 1)) if b else "-" for a, b in v)
    print(*key, "|", "/".join("%.3f" % (x * 1e3) for x in m), "| %.2f%% |" % (100 * spread), "/".join("%.3f" % (x * 1e3) for x in me), "|", errs)
PY
for i in 1 2 3; do grep -h "waits\|^  *launch \|events " $T/cal$i.log | head -5; echo "provenance warnings: $(grep -c "warning: provenance" $T/cal$i.log)"; grep -h "^memory\|latency_local\|pack_long\|pack_short\|quantize =" $T/p$i.toml | tr '\n' ' '; echo; sed -n '/one_process\]/,/per_gpu\]/p' $T/p$i.toml | grep "host_\|box_lat" | tr '\n' ' '; echo; done
