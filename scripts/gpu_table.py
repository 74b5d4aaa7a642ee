#!/usr/bin/env python3
"""Prints one table of `m2n run --json` files: python3 scripts/gpu_table.py OUT/*.json.

Each file is named CONFIG.json; a row per (config, point, route), with the
launch mode, the model of the same run and its error (modeled / measured - 1)."""
import json
import os
import sys


def ms(s):
    return f"{s * 1e3:.3f} ms" if s else "-"


def main(paths):
    rows = [("config", "point", "route", "launch", "transport", "measured", "min", "modeled", "error", "groups", "host issue", "issue/meas", "peak/GPU", "staging", "verified")]
    torch = []
    for p in paths:
        name = os.path.basename(p)[:-5]
        try:
            doc = json.load(open(p))
        except Exception as e:  # a run that printed nothing: say so
            rows.append((name, "-", "-", "", "", f"no JSON: {e}", "", "", "", "", "", "", "", "", ""))
            continue
        if "per-tensor" in doc:  # scripts/torch_refit.py
            for m in ("per-tensor", "bucketed"):
                torch.append(f"{name}: {m} {ms(doc[m]['median_s'])} median (min {ms(doc[m]['min_s'])}), {doc['bytes'] / 2**30:.2f} GiB a rank")
            continue
        for r in doc.get("records", []):
            point = ",".join(f"{k}={v}" for k, v in sorted(r.get("point", {}).items())) or "-"
            if r.get("error") and not r.get("measured_s"):
                rows.append((name, point, r["route"], r.get("launch", ""), "", "ERROR " + r["error"][:60], "", "", "", "", "", "", "", "", ""))
                continue
            g = r.get("nccl_groups", 0)
            hi = r.get("host_issue_s", 0)
            err = f"{100 * r['model_error']:+.1f}%" if r.get("modeled_s") else "-"
            rows.append((name, point, r["route"], r.get("launch", ""), r.get("transport", ""), ms(r["measured_s"]), ms(r["measured_min_s"]), ms(r.get("modeled_s", 0)), err, str(g), f"{hi * 1e6:.0f} us",
                         f"{100 * hi / r['measured_s']:.1f}%", f"{r.get('peak_device_bytes', 0) / 2**20:.0f} MiB", f"{r.get('staging_bytes', 0) / 2**20:.0f} MiB",
                         "ok" if r["verified"] else "WRONG"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    for t in torch:
        print(t)


if __name__ == "__main__":
    main(sys.argv[1:])
