#!/usr/bin/env python3
"""A whole-model refit as a PyTorch user writes it, beside m2n on the same job.

Reads the tensors and layouts of an m2n schedule (`m2n plan --ir FILE`) whose
source layouts are one-axis (S(d) or R over all ranks) and whose
destinations are replicated on the same ranks (a colocated trainer TP/EP -> a
generator TP1 x DP, as scenarios/dense-2gpu.toml and moe-2gpu.toml), and
times two ways to do it with torch.distributed:

  per-tensor: for each tensor, all_gather_into_tensor of the shards (dim 0),
              or into a scratch tensor then torch.cat along the split dim;
              a replicated source is copied locally;
  bucketed:   the shards packed into flat buckets of at most --bucket-mb,
              one all_gather_into_tensor per bucket, then unpacked.

Every output is checked against the whole tensor after the first iteration.
Run one process per GPU:
  bin/m2n plan --route flat --ir refit.json dense-2gpu
  torchrun --nproc-per-node 2 scripts/torch_refit.py --ir refit.json --json out.json
Prints one line per method (median, min and max of --iters after --warmup).
"""
import argparse
import json
import os
import re

import torch
import torch.distributed as dist

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def shard_dim(layout, world):
    """The sharded dim of a one-axis layout over every rank (None: replicated)."""
    mesh = [m for m in layout["mesh"] if m != 1]
    pl = [p for m, p in zip(layout["mesh"], layout["placements"]) if m != 1]
    if layout["ranks"] != list(range(world)) or len(mesh) > 1:
        raise SystemExit(f"torch_refit: layout {layout}: want one axis over ranks 0..{world - 1}")
    if not pl or pl[0] == "R":
        return None
    m = re.fullmatch(r"S\((\d+)\)", pl[0])
    if not m:
        raise SystemExit(f"torch_refit: placement {pl[0]}")
    return int(m.group(1))


CHUNK = 1 << 26  # elements a pattern is made or checked in at a time


def pattern_chunk(lo, hi, tid, dtype, dev):
    """Small integers (exact in bf16) of flat global indices [lo, hi)."""
    g = torch.arange(lo, hi, device=dev, dtype=torch.int64)
    g.mul_(7).add_(tid).remainder_(251)
    return g.to(dtype)


def pattern(shape, tid, dtype, dev):
    """The whole tensor's pattern, made a chunk at a time."""
    out = torch.empty(shape, dtype=dtype, device=dev)
    flat = out.view(-1)
    for lo in range(0, flat.numel(), CHUNK):
        hi = min(lo + CHUNK, flat.numel())
        flat[lo:hi] = pattern_chunk(lo, hi, tid, dtype, dev)
    return out


def matches(out, tid):
    flat = out.view(-1)
    for lo in range(0, flat.numel(), CHUNK):
        hi = min(lo + CHUNK, flat.numel())
        if not torch.equal(flat[lo:hi], pattern_chunk(lo, hi, tid, out.dtype, out.device)):
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ir", required=True, help="an m2n schedule (m2n plan --ir)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--bucket-mb", type=int, default=1024, help="the most MiB one bucket's shards hold")
    ap.add_argument("--json", help="write the times here (rank 0)")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    doc = json.load(open(args.ir))
    tensors = []
    for tid, t in enumerate(doc["tensors"]):
        if t.get("dst_dtype") or t.get("scale_of"):
            raise SystemExit(f"torch_refit: {t['name']}: quantized destinations are not modeled here")
        if shard_dim(t["dst"], world) is not None:
            raise SystemExit(f"torch_refit: {t['name']}: the destination must be replicated")
        d = shard_dim(t["src"], world)
        shape, dtype = t["shape"], DTYPES[t["dtype"]]
        full = pattern(shape, tid, dtype, dev)
        if d is None:
            shard = full.clone()
        else:
            chunk = -(-shape[d] // world)
            if shape[d] % world:
                raise SystemExit(f"torch_refit: {t['name']}: uneven shards are not modeled here")
            shard = full.narrow(d, rank * chunk, chunk).contiguous()
        del full
        out = torch.empty(shape, dtype=dtype, device=dev)
        tensors.append((tid, t["name"], d, shard, out))
    nbytes = sum(o.numel() * o.element_size() for _, _, _, _, o in tensors)

    def check(method):
        for tid, name, _, _, out in tensors:
            if not matches(out, tid):
                raise SystemExit(f"torch_refit {method}: {name} differs on rank {rank}")

    def per_tensor():
        for _, _, d, shard, out in tensors:
            if d is None:
                out.copy_(shard)
            elif d == 0:
                dist.all_gather_into_tensor(out, shard)
            else:
                tmp = torch.empty((world * shard.shape[0],) + tuple(shard.shape[1:]), dtype=shard.dtype, device=dev)
                dist.all_gather_into_tensor(tmp, shard)
                torch.cat(tmp.chunk(world), dim=d, out=out)

    # Buckets of sharded tensors, each at most --bucket-mb of shards.
    buckets, cur, size = [], [], 0
    cap = args.bucket_mb << 20
    for t in tensors:
        if t[2] is None:
            continue
        b = t[3].numel() * t[3].element_size()
        if cur and size + b > cap:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += b
    if cur:
        buckets.append(cur)

    def bucketed():
        for _, _, d, shard, out in tensors:
            if d is None:
                out.copy_(shard)
        for b in buckets:
            dtype = b[0][3].dtype
            if any(t[3].dtype != dtype for t in b):
                raise SystemExit("torch_refit: a bucket mixes dtypes")
            flat = torch.cat([t[3].reshape(-1) for t in b])
            gathered = torch.empty(world * flat.numel(), dtype=dtype, device=dev)
            dist.all_gather_into_tensor(gathered, flat)
            per = gathered.view(world, -1)
            off = 0
            for _, _, d, shard, out in b:
                n = shard.numel()
                for r in range(world):
                    out.narrow(d, r * shard.shape[d], shard.shape[d]).copy_(per[r, off:off + n].view(shard.shape))
                off += n

    results = {}
    for name, fn in (("per-tensor", per_tensor), ("bucketed", bucketed)):
        for _, _, _, _, out in tensors:
            out.fill_(0)
        fn()
        torch.cuda.synchronize()
        check(name)
        for _ in range(args.warmup):
            fn()
        times = []
        for _ in range(args.iters):
            dist.barrier()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        times.sort()
        results[name] = {"median_s": times[len(times) // 2], "min_s": times[0], "max_s": times[-1]}
        if rank == 0:
            print(f"torch_refit {name}: {times[len(times) // 2] * 1e3:.2f} ms median ({times[0] * 1e3:.2f} .. {times[-1] * 1e3:.2f}), "
                  f"{len(tensors)} tensors, {nbytes / 2**30:.2f} GiB each rank, every byte checked", flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"ir": args.ir, "tensors": len(tensors), "bytes": nbytes, "buckets": len(buckets), **results}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
