#!/usr/bin/env python3
"""The held-out table of scripts/gpu-calibrate.sh, with every preset's prediction.

python3 scripts/heldout_table.py OUT   (run where bin/m2n is; no GPU needed)

OUT holds what scripts/gpu-calibrate.sh wrote there: the presets
hgx-h200-measured-K.toml and the run records CONFIG.json, measured with
preset 1. For every record it asks `bin/m2n sim --model PRESET` what each
preset predicts for the same (scenario, point, route, launch mode,
transport), and prints one Markdown row per record: the measured median,
each preset's model and error (modeled / measured - 1), and the spread of
the presets' predictions ((max - min) / min). Every record is a row; a
record without a measurement says why. Then the tally, and the same by
class of run (transport, launch mode, route family; loopback and fp8-2gpu
apart): within +-10% (preset 1), spread within 3%, preset 1's errors
and their mean magnitude; and each preset's rows within 10% and 15%.

OUT may hold scripts/gpu-check.sh's records instead, with no presets: the
embedded preset (hgx-h200-measured) predicts them. M2N names another m2n
binary than bin/m2n (an older build, to compare its model)."""
import glob
import json
import os
import subprocess
import sys

# How scripts/gpu-calibrate.sh and scripts/gpu-check.sh ran each config
# (a record file's name, or its prefix before a "-"): the scenario and the
# planning flags that shape the schedule (the model needs the same). A
# loopback run is predicted with --loopback: its record says so.
PAPER_LOOP = ["--scale", "0.0625", "paper-ffn-moe"]
QWEN3_LOOP = ["--scale", "0.002", "--staging-cap", "256MiB", "qwen3-235b-128"]
CONFIGS = {
    "paper": ["paper-2gpu"],
    "dense": ["dense-2gpu"],
    "moe-1proc-legacy": ["--staging-cap", "8GiB", "moe-2gpu"],
    "moe": ["moe-2gpu"],
    "loop-paper": PAPER_LOOP,
    "loop-copy": PAPER_LOOP,  # gpu-check.sh's names from here
    "loop-nccl": PAPER_LOOP,
    "loop-qwen3": QWEN3_LOOP,
    "qwen3-capped": QWEN3_LOOP,
    "loop-fp8": ["fp8-2gpu"],
    "fp8": ["fp8-2gpu"],
    "scales": ["dense-2gpu-scales"],
    "loop-scales": ["dense-2gpu-scales"],
    "loop-tp2-scales": ["dense-2gpu-tp2-scales"],
    "loop-families": ["families-2gpu"],
    "families": ["families-2gpu"],
}


def flags_of(name):
    for prefix in sorted(CONFIGS, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "-"):
            return CONFIGS[prefix]
    return None


def predict(preset, args, route, point, launch, transport, loopback, cache):
    key = (preset, tuple(args), route, launch, transport, loopback)
    if key not in cache:
        cmd = [os.environ.get("M2N", "bin/m2n"), "sim", "--json", "--model", preset, "--route", route, "--transport", transport]
        cmd += ["--loopback"] if loopback else ["--launch", launch]
        out = subprocess.run(cmd + args, capture_output=True, text=True)
        recs = json.loads(out.stdout)["records"] if out.returncode == 0 else []
        cache[key] = {json.dumps(r.get("point", {}), sort_keys=True): r.get("modeled_s") for r in recs}
        if out.returncode != 0:
            cache[key]["error"] = out.stderr.strip().splitlines()[-1]
    got = cache[key]
    return got.get(json.dumps(point, sort_keys=True)), got.get("error")


def main(out):
    presets = sorted(glob.glob(os.path.join(out, "hgx-h200-measured-*.toml")))
    if not presets:
        # Records without a calibration beside them (scripts/gpu-check.sh's):
        # the embedded preset predicts them.
        presets = ["hgx-h200-measured"]
    cache = {}
    head = ["config", "point", "route", "launch", "transport", "measured"]
    head += [f"preset {k + 1} (error)" for k in range(len(presets))] + ["spread"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    tally = {"rows": 0, "within 10%": 0, "spread within 3%": 0, "no measurement": 0, "no prediction": 0}
    by_preset = [[0, 0] for _ in presets]  # per preset: rows within 10%, within 15%
    classes = {}  # class -> [runs, within 10%, spread within 3%, errors]
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        name = os.path.basename(path)[:-5]
        args = flags_of(name)
        try:
            doc = json.load(open(path))
        except Exception as e:
            print(f"| {name} | - | - | - | - | no JSON ({e.__class__.__name__}) |" + " |" * (len(presets) + 1))
            tally["rows"] += 1
            tally["no measurement"] += 1
            continue
        want = args[-1] if args else None
        if want is None or doc.get("scenario") != want:
            # A record is predicted from its config's scenario: one of
            # another scenario (or no config) would be predicted wrong.
            for r in doc.get("records", []):
                tally["rows"] += 1
                tally["no prediction"] += 1
                print(f"| {name} | - | {r.get('route', '')} | {r.get('launch', '')} | {r.get('transport', '')} | scenario {doc.get('scenario')!r}, but the config {name!r} predicts {want!r} |" + " |" * (len(presets) + 1))
            continue
        for r in doc.get("records", []):
            tally["rows"] += 1
            point = r.get("point", {})
            label = ",".join(f"{k}={v}" for k, v in sorted(point.items())) or "-"
            m = r.get("measured_s")
            if not m:
                tally["no measurement"] += 1
                print(f"| {name} | {label} | {r['route']} | {r.get('launch', '')} | | {('error: ' + r.get('error', ''))[:70]} |" + " |" * (len(presets) + 1))
                continue
            loopback = r.get("backend") == "loopback"
            cells, models = [], []
            for p in presets:
                v, err = predict(p, args or [], r["route"], point, r.get("launch", "one-process"), r.get("transport", "nccl"), loopback, cache)
                if v:
                    models.append(v)
                    cells.append(f"{v * 1e3:.3f} ms ({100 * (v / m - 1):+.1f}%)")
                else:
                    cells.append("- " + (err or "")[:40])
            spread = (max(models) - min(models)) / min(models) if len(models) > 1 else 0
            for k, p in enumerate(presets):
                v, _ = predict(p, args or [], r["route"], point, r.get("launch", "one-process"), r.get("transport", "nccl"), loopback, cache)
                if v:
                    by_preset[k][0] += abs(v / m - 1) <= 0.10
                    by_preset[k][1] += abs(v / m - 1) <= 0.15
            if not models:
                tally["no prediction"] += 1
            else:
                within = abs(models[0] / m - 1) <= 0.10
                steady = len(models) == len(presets) and spread <= 0.03
                tally["within 10%"] += within
                tally["spread within 3%"] += steady
                c = classes.setdefault(run_class(name, r), [0, 0, 0, []])
                c[0] += 1
                c[1] += within
                c[2] += steady
                c[3].append(models[0] / m - 1)
            print(f"| {name} | {label} | {r['route']} | {r.get('launch', '')} | {r.get('transport', '')} | {m * 1e3:.3f} ms | " + " | ".join(cells) + f" | {100 * spread:.1f}% |")
    print()
    print(", ".join(f"{k}: {v}" for k, v in tally.items()) + f" (of {tally['rows']} rows; within 10%: preset 1's error)")
    print("by preset, rows within 10% / 15%: " + ", ".join(f"{os.path.basename(p)} {w} / {w15}" for p, (w, w15) in zip(presets, by_preset)))
    print()
    print("| runs | within +-10% | spread of the presets <= 3% | errors (preset 1) | mean abs. error |")
    print("|---|---|---|---|---|")
    for k in sorted(classes):
        n, w, sp, errs = classes[k]
        mean = sum(abs(e) for e in errs) / n
        print(f"| {k} | {w} of {n} | {sp} of {n} | {100 * min(errs):+.1f}..{100 * max(errs):+.1f}% | {100 * mean:.1f}% |")


def run_class(name, r):
    """The class of a run: loopback and fp8-2gpu by transport, two-GPU runs
    by transport, launch mode and route family."""
    transport = r.get("transport", "nccl")
    if r.get("backend") == "loopback":
        return "loopback, " + transport
    if name.startswith("fp8"):
        return "fp8-2gpu, " + transport
    family = "agbcast, nemo-legacy" if r["route"] in ("agbcast", "nemo-legacy") else "flat, hierarchical"
    return f"2 GPUs, {transport}, {r.get('launch', 'one-process')}: {family}"


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "./gpu-out")
