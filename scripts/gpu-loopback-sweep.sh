#!/usr/bin/env bash
# Device copies on one GPU by size, as the loopback executor issues them
# (docs/calibration.md, "Device copies in loopback, by size"): scenarios
# generated here (TOML under OUT/sc) of one tensor per copy, run with
# `m2n run` in loopback, every run profiled with the model beside it.
#   - both: transfers both ways between two ranks, 1 and 4 lanes;
#   - xfer: transfers one way (rank 0 to rank 1), one lane;
#   - self: local copies on rank 0 (batched into copy kernels), one lane;
# then the kernels of fp8-2gpu's flat schedule on one lane, timed by Nsight
# Compute with the clocks and caches left alone. Build here with `make
# gpu-test`, copy bin/ and scripts/ to the GPU machine and run this there;
# OUT (default ./gpu-out) gets the JSON; the last lines are one table.
set -uo pipefail
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT/sc"
python3 - "$OUT/sc" <<'PY'
import sys
d = sys.argv[1]
def write(name, what, tensors):
    with open(f"{d}/{name}.toml", "w") as f:
        f.write(f'name = "{name}"\ndescription = "{what}"\nroutes = ["flat"]\n[topology]\npreset = "hgx-h200"\n')
        for i, t in enumerate(tensors):
            f.write(f'[[tensors]]\nname = "a{i}"\n{t}\n')
for kib in (64, 256, 1024, 1536, 4096, 16384, 65536):
    n = kib * 1024
    count = max(4, min(512, (512 << 20) // (2 * n)))
    write(f"both{kib}", f"{count} tensors of {kib} KiB each way between 2 ranks",
          [f'shape = [2, {n}]\ndtype = "uint8"\nsrc = {{ shape = [2], ranks = "0-1", placements = ["S(0)"] }}\ndst = {{ shape = [2], ranks = "1,0", placements = ["S(0)"] }}'] * count)
for kind, dst in (("self", "0"), ("xfer", "1")):
    for kib in (64, 1024, 4096, 16384, 65536, 262144, 1048576):
        n = kib * 1024
        count = max(1, min(256, (1 << 30) // n))
        write(f"{kind}{kib}", f"{count} x {kib} KiB from rank 0 to rank {dst}",
              [f'shape = [{n}]\ndtype = "uint8"\nsrc = {{ shape = [1], ranks = "0", placements = ["R"] }}\ndst = {{ shape = [1], ranks = "{dst}", placements = ["R"] }}'] * count)
PY
run() { local n=$1; shift; timeout 100 bin/m2n run --profile --coalesce none --iters 10 --warmup 3 --json "$@" > "$OUT/$n.json" 2> "$OUT/$n.err" || echo "$n failed"; }
for kib in 64 256 1024 1536 4096 16384 65536; do
	for l in 1 4; do run both$kib-l$l --lanes $l "$OUT/sc/both$kib.toml"; done
done
for kind in self xfer; do
	for kib in 64 1024 4096 16384 65536 262144 1048576; do run $kind$kib-l1 --lanes 1 "$OUT/sc/$kind$kib.toml"; done
done
for nb in 0 1; do
	M2N_NO_BATCH=$nb timeout 200 ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum \
		bin/m2n run --lanes 1 --iters 1 --warmup 0 --graph=false --route flat fp8-2gpu > "$OUT/ncu-fp8-nobatch$nb.csv" 2> "$OUT/ncu-fp8-nobatch$nb.err" || echo "ncu $nb failed"
done
python3 - "$OUT" <<'PY'
import csv, glob, json, os, re, sys
out = sys.argv[1]
print("run             tensors  measured   per tensor  GB/s (read+write)  modeled    error")
def key(f):
    m = re.match(r"([a-z]+)(\d+)-l(\d)", os.path.basename(f)); return (m.group(1), int(m.group(2)), int(m.group(3)))
for f in sorted(glob.glob(out + "/*-l[14].json"), key=key):
    kind, kib, lanes = key(f)
    try:
        r = json.load(open(f))["records"][0]
    except Exception as e:
        print(os.path.basename(f), "unreadable:", e); continue
    n = kib * 1024
    # the generator's counts: a tensor is one copy each way (both), one copy (self, xfer)
    count = max(4, min(512, (512 << 20) // (2 * n))) if kind == "both" else max(1, min(256, (1 << 30) // n))
    copies = 2 * count if kind == "both" else count
    per = r["measured_s"] / count
    rate = 2 * n * copies / r["measured_s"] / 1e9
    print("%-15s %7d  %8.3f ms %8.2f us  %8.0f          %8.3f ms %+6.1f%%" % (f"{kind}{kib}-l{lanes}", count, r["measured_s"] * 1e3, per * 1e6, rate, r["modeled_s"] * 1e3, 100 * (r["modeled_s"] / r["measured_s"] - 1)))
for nb in (0, 1):
    try:
        rows = list(csv.reader(open(f"{out}/ncu-fp8-nobatch{nb}.csv")))
        st = [i for i, r in enumerate(rows) if r and r[0] == "ID"][0]
    except Exception as e:
        print("ncu", nb, "unreadable:", e); continue
    h = rows[st]; ix = {k: j for j, k in enumerate(h)}
    print(f"fp8-2gpu flat, one lane, M2N_NO_BATCH={nb}: kernels of the first iteration (ns)")
    n = 0
    for r in rows[st + 1:]:
        if len(r) < len(h) or r[ix["Kernel Name"]].startswith(("fill", "verify")):
            continue
        n += 1
        if n > 40:
            break
        print("  %-36s %-14s %s" % (r[ix["Kernel Name"]][:36], r[ix["Grid Size"]], r[ix["Metric Value"]]))
PY
