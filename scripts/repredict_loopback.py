#!/usr/bin/env python3
"""Predict recorded loopback runs again with this build's model.

python3 scripts/repredict_loopback.py [-v] FILE.json...   (no GPU needed)

Each FILE is a record file scripts/gpu-check.sh wrote (loop-copy.json,
loop-nccl.json, loop-scales.json, loop-tp2-scales.json, qwen3-capped.json,
families-copy.json, families-nccl.json: the name says which scenario and
flags it ran). For every record it asks `bin/m2n sim --json --model
hgx-h200-measured --loopback --transport T` (M2N names another binary) what
the embedded preset predicts for the same scenario, point and route, and
prints the tally by transport: runs within +-10% (error = modeled /
measured - 1) and the mean |error|; -v prints every run beside the
prediction the record holds (the model of the build that ran it)."""
import collections
import json
import os
import subprocess
import sys

# The flags scripts/gpu-check.sh ran each file's scenario with.
FLAGS = {
    "loop-copy": ["--scale", "0.0625", "paper-ffn-moe"],
    "loop-nccl": ["--scale", "0.0625", "paper-ffn-moe"],
    "loop-scales": ["dense-2gpu-scales"],
    "loop-tp2-scales": ["dense-2gpu-tp2-scales"],
    "qwen3-capped": ["--scale", "0.002", "--staging-cap", "256MiB", "qwen3-235b-128"],
    "families-copy": ["families-2gpu"],
    "families-nccl": ["families-2gpu"],
}


def main(argv):
    verbose = "-v" in argv
    files = [a for a in argv if a != "-v"]
    if not files:
        sys.exit(__doc__)
    m2n = os.environ.get("M2N", "bin/m2n")
    cache, rows = {}, []
    for f in files:
        name = os.path.basename(f)[: -len(".json")]
        if name not in FLAGS:
            sys.exit(f"{f}: not a file scripts/gpu-check.sh writes (known: {', '.join(sorted(FLAGS))})")
        for r in json.load(open(f))["records"]:
            key = (name, r["transport"])
            if key not in cache:
                cmd = [m2n, "sim", "--json", "--model", "hgx-h200-measured", "--loopback", "--transport", r["transport"]] + FLAGS[name]
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
                cache[key] = json.loads(out.stdout)["records"]
            pt = r.get("point") or {}
            match = [s for s in cache[key] if s["route"] == r["route"] and (s.get("point") or {}) == pt]
            if not match:
                sys.exit(f"{f}: no prediction for point {pt}, route {r['route']}")
            m = match[0]["modeled_s"]
            rows.append((name, pt, r["route"], r["transport"], r["measured_s"], m, r.get("modeled_s")))
    total, within, abserr = collections.Counter(), collections.Counter(), collections.Counter()
    for name, pt, route, tr, meas, m, rec in rows:
        err = m / meas - 1
        total[tr] += 1
        within[tr] += abs(err) <= 0.10
        abserr[tr] += abs(err)
        if verbose:
            was = f"(recorded {rec / meas - 1:+6.1%})" if rec else ""
            p = ",".join(f"{k}={v}" for k, v in sorted(pt.items()))
            print(f"{name:16} {p:24} {route:13} {tr:5} {meas * 1e3:9.3f} ms {m * 1e3:9.3f} ms {err:+7.1%} {was}")
    for tr in sorted(total):
        print(f"{tr}: {within[tr]} of {total[tr]} within 10%, mean |error| {abserr[tr] / total[tr]:.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
