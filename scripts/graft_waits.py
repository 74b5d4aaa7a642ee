"""Flat's copies with hierarchical's waits across lanes (docs/calibration.md,
"Lanes and waits across them"): the paper layer's flat and hierarchical
schedules in loopback move the same bytes on the same four lanes, 64 copies
a lane, and differ in hierarchical's forwards waiting for copies on other
lanes. This writes flat's IR with those waits grafted on, by lane and
position: each of flat's copies waits for the copies at the lanes and
positions that the hierarchical copy in its place waits for.

python3 scripts/graft_waits.py FLAT.ir.json HIERARCHICAL.ir.json DIR
(from `m2n plan --scale 0.0625 --point rho=2 --route R --ir F paper-ffn-moe`)
writes DIR/flat-graft.ir.json (every wait), DIR/flat-w23.ir.json (only
lanes 2 and 3 wait) and DIR/flat-w01.ir.json (only lanes 0 and 1); run each
with `m2n run --ir F --topology hgx-h200-measured --lanes 4 --profile`."""
import json
import sys

LANES = 4


def positions(d):
    """(lane, position) of each send, as program.Compile places a copy in
    loopback: a lane per ordered pair of ranks, round robin in op order;
    a lane's copies in op order (every dependency points back)."""
    lane_of, pos, count = {}, {}, [0] * LANES
    for o in d["ops"]:
        if o["kind"] in ("send", "recv"):
            pair = (o["rank"], o["peer"]) if o["kind"] == "send" else (o["peer"], o["rank"])
            lane_of.setdefault(pair, len(lane_of) % LANES)
    for o in d["ops"]:
        if o["kind"] == "send":
            lane = lane_of[(o["rank"], o["peer"])]
            pos[o["id"]] = (lane, count[lane])
            count[lane] += 1
    return pos


def main(flat_path, hier_path, out):
    flat, hier = json.load(open(flat_path)), json.load(open(hier_path))
    hp, fp = positions(hier), positions(flat)
    at = {v: k for k, v in fp.items()}
    send = lambda d, i: d["ops"][i]["match"] if d["ops"][i]["kind"] == "recv" else i
    waits = []  # ((lane, pos) of the waiting copy, (lane, pos) it waits for)
    for o in hier["ops"]:
        if o["kind"] == "send":
            for x in o.get("deps", []):
                q = hp[send(hier, x)]
                if q[0] != hp[o["id"]][0]:
                    waits.append((hp[o["id"]], q))
    for name, keep in (("graft", lambda lane: True), ("w23", lambda lane: lane >= 2), ("w01", lambda lane: lane < 2)):
        g = json.loads(json.dumps(flat))
        for a, b in waits:
            if keep(a[0]):
                me = g["ops"][at[a]]
                me["deps"] = sorted(set(me.get("deps", [])) | {g["ops"][at[b]]["match"]})
        with open(f"{out}/flat-{name}.ir.json", "w") as f:
            json.dump(g, f)
    print(f"{len(waits)} waits across lanes grafted")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
