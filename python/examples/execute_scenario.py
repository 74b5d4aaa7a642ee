#!/usr/bin/env python3
"""Any scenario's schedule run through Plan.execute, to set beside `m2n run`.

Under torchrun, one process a GPU: plans the route at the point of a
scenario file (as `m2n run` does), makes each rank's source shards as
slices of a whole tensor torch generates and an empty destination of each
output box, runs the plan with Plan.execute on torch's current stream over
the communicator borrowed from torch's process group, checks every
destination element against the whole tensor, and prints the median of
--iters runs after --warmup (CUDA events; the slowest rank's).

    torchrun --nproc-per-node 2 python/examples/execute_scenario.py scenarios/paper-2gpu.toml --route flat
    torchrun --nproc-per-node 2 --no-python bin/m2n run --backend nccl --transport nccl --route flat paper-2gpu

Quantized destinations are not handled here (their bytes are not a slice).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

try:
    import m2n  # installed (pip install --no-build-isolation ./python)
except ImportError:  # or the repository's copy
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import m2n

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--route", default="flat")
    ap.add_argument("--point", default="")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    plan = m2n.Plan.from_scenario(path=a.scenario, route=a.route, point=a.point)
    ir = plan.ir
    me = ir["world"][rank]["rank"]
    arrays, want = {}, {}
    for b in ir["buffers"]:
        if b["rank"] != me or b["kind"] not in ("input", "output"):
            continue
        t = ir["tensors"][b["tensor"]]
        g = torch.Generator(device="cuda").manual_seed(7 + b["tensor"])
        whole = torch.randn(t["shape"], generator=g, device="cuda", dtype=DT[t["dtype"]])
        box = tuple(slice(s, s + n) for s, n in zip(b["box"]["start"], b["box"]["size"]))
        side = "src" if b["kind"] == "input" else "dst"
        arrays.setdefault(t["name"], {})[side] = whole[box].contiguous() if side == "src" else torch.empty(b["box"]["size"], device="cuda", dtype=DT[t["dtype"]])
        if side == "dst":
            want[t["name"]] = whole[box].contiguous()
        del whole
    comm = m2n.torch_comm()
    stream = torch.cuda.current_stream()
    times, bad = [], 0
    run = plan.bind(arrays, comm, stream=stream, rank=rank)  # the arrays read once
    for i in range(1 + a.warmup + a.iters):
        for n in want:
            arrays[n]["dst"].zero_()
        dist.barrier()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(stream)
        run()
        e.record(stream)
        e.synchronize()
        if i > a.warmup:
            times.append(s.elapsed_time(e))
        if i in (0, a.warmup + a.iters):
            bad += sum(not torch.equal(arrays[n]["dst"], w) for n, w in want.items())
    times.sort()
    t = torch.tensor([times[len(times) // 2], float(bad)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    rec = plan.simulate()
    if rank == 0:
        print(f"execute {os.path.basename(a.scenario)} {a.route}: median of {a.iters} {t[0].item():.3f} ms (slowest rank), "
              f"min {times[0]:.3f} ms on rank 0; model {rec['modeled_s'] * 1e3:.3f} ms; {int(t[1].item())} outputs wrong")
    plan.close()
    dist.destroy_process_group()
    return 1 if t[1].item() else 0


if __name__ == "__main__":
    sys.exit(main())
