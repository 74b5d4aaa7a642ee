"""What a wait across streams costs copies running beside each other on one
GPU (docs/calibration.md, "Lanes and waits across them"): 896 MiB an
iteration in device copies (copy_ of contiguous uint8 tensors, one
cudaMemcpyAsync each) on L streams, copy k on stream k % L, captured in one
CUDA graph as m2n's executor captures its lanes, with waits across streams
added: "j<-i xN" makes N of stream j's copies (from its 33rd on, every
other one) wait for stream i's first copy, long finished by then; "rev"
issues each round of copies from the last stream to the first. Prints the
median iteration (10 after 3 warm-ups) and each stream's end, in us.

python3 scripts/torch_lane_waits.py [OUT.json]"""
import json
import statistics
import sys

import torch

MiB = 1 << 20
BIG = 896 * MiB


def run(src, dst, lanes, size, waits, rev=False):
    n = BIG // size
    per = n // lanes
    streams = [torch.cuda.Stream() for _ in range(lanes)]
    want = {}
    for a, b in waits:
        want.setdefault(a, []).append(b)
    order = list(range(lanes))[::-1] if rev else list(range(lanes))
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        main = torch.cuda.current_stream()
        t0 = torch.cuda.Event(enable_timing=True, external=True)
        t0.record(main)
        start = torch.cuda.Event()
        start.record(main)
        for s in streams:
            s.wait_event(start)
        done = {}
        for p in range(per):
            for lane in order:
                s = streams[lane]
                for q in want.get((lane, p), []):
                    s.wait_event(done[q])
                k = lane + lanes * p
                with torch.cuda.stream(s):
                    dst[k * size:(k + 1) * size].copy_(src[k * size:(k + 1) * size])
                e = torch.cuda.Event()
                e.record(s)
                done[(lane, p)] = e
        ends = []
        for s in streams:
            e = torch.cuda.Event(enable_timing=True, external=True)
            e.record(s)
            ends.append(e)
            main.wait_stream(s)
    times, lane_ends = [], []
    for it in range(13):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        if it >= 3:
            times.append(a.elapsed_time(b) * 1e3)
            lane_ends.append([t0.elapsed_time(e) * 1e3 for e in ends])
    return {"us": round(statistics.median(times), 1),
            "ends": [round(statistics.median(x[i] for x in lane_ends), 1) for i in range(lanes)]}


def waits(lane, other, count, first=32, step=2):
    """lane's copies first, first+step, ... wait for other's first copy."""
    return [((lane, first + step * i), (other, 0)) for i in range(count)]


def main(out):
    dev = torch.device("cuda")
    src = torch.empty(BIG, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    m35 = 7 * MiB // 2
    cases = [
        ("L4 3.5m none", 4, m35, [], False),
        ("L4 3.5m 3<-0 x1", 4, m35, waits(3, 0, 1), False),
        ("L4 3.5m 3<-0 x4", 4, m35, waits(3, 0, 4), False),
        ("L4 3.5m 3<-0 x16", 4, m35, waits(3, 0, 16), False),
        ("L4 3.5m 3<-0 x32", 4, m35, waits(3, 0, 32, step=1), False),
        ("L4 3.5m 0<-3 x16", 4, m35, waits(0, 3, 16), False),
        ("L4 3.5m 1<-0 x16", 4, m35, waits(1, 0, 16), False),
        ("L4 3.5m 0<-1 x16", 4, m35, waits(0, 1, 16), False),
        ("L4 3.5m rev 3<-0 x16", 4, m35, waits(3, 0, 16), True),
        ("L4 3.5m rev 0<-3 x16", 4, m35, waits(0, 3, 16), True),
        ("L2 3.5m none", 2, m35, [], False),
        ("L2 3.5m 1<-0 x16", 2, m35, waits(1, 0, 16, first=64), False),
        ("L2 3.5m 0<-1 x16", 2, m35, waits(0, 1, 16, first=64), False),
        ("L4 1m none", 4, MiB, [], False),
        ("L4 1m 3<-0 x16", 4, MiB, waits(3, 0, 16), False),
        ("L4 16m none", 4, 16 * MiB, [], False),
        ("L4 16m 3<-0 x7", 4, 16 * MiB, waits(3, 0, 7, first=1), False),
    ]
    res = {}
    for name, lanes, size, w, rev in cases:
        res[name] = run(src, dst, lanes, size, w, rev)
        print(f"{name:24s} {res[name]['us']:8.1f} us  stream ends {res[name]['ends']}", flush=True)
    if out:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
