#!/usr/bin/env python3
"""The legacy refit path as PyTorch users run it, beside m2n's routes.

The paper's layer scaled to the GPUs at hand: a [E, 2048, 7168] bf16 tensor,
sharded S(0) over the source ranks; the destination ranks want TP slots of
dim 1, replicated. Legacy: torch.distributed.all_gather on the source group,
then broadcast of the whole tensor from source rank 0 to every destination
rank, each keeping its slot.

Run one process per GPU, e.g. on 8 GPUs with 2 sources:
  torchrun --nproc-per-node 8 scripts/torch_legacy.py --sources 2 --tp 2
or colocated on 2 GPUs (every rank a source and a destination), as
scenarios/paper-2gpu.toml:
  torchrun --nproc-per-node 2 scripts/torch_legacy.py --sources 2 --tp 1
Prints the median time of the two collectives and checks every byte.
"""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sources", type=int, default=2, help="source ranks (the first ones)")
    ap.add_argument("--tp", type=int, default=2, help="destination TP: slots of dim 1")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    src_ranks = list(range(args.sources))
    # Destinations: the ranks after the sources, or every rank when the
    # sources are all of them (colocated).
    dst_ranks = list(range(args.sources, world)) if args.sources < world else list(range(world))
    src_group = dist.new_group(src_ranks)
    bcast_ranks = sorted(set([0] + dst_ranks))
    bcast_group = dist.new_group(bcast_ranks)
    shape = (args.experts, 2048, 7168)
    shard = args.experts // args.sources
    full = torch.arange(torch.Size(shape).numel(), dtype=torch.int64, device="cuda").remainder(65521).to(torch.bfloat16).view(shape)
    mine = full[rank * shard:(rank + 1) * shard].clone() if rank in src_ranks else None
    gathered = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
    times = []
    for it in range(args.iters + 2):
        dist.barrier()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if rank in src_ranks:
            dist.all_gather_into_tensor(gathered, mine, group=src_group)
        if rank in bcast_ranks:
            dist.broadcast(gathered, src=0, group=bcast_group)
        stop.record()
        torch.cuda.synchronize()
        if it >= 2:
            times.append(start.elapsed_time(stop) / 1e3)
    ok = True
    if rank in dst_ranks:
        slot = dst_ranks.index(rank) % args.tp
        rows = 2048 // args.tp
        keep = gathered[:, slot * rows:(slot + 1) * rows].clone()
        ok = torch.equal(keep, full[:, slot * rows:(slot + 1) * rows])
    t = torch.tensor([max(times) if times else 0.0], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    okt = torch.tensor([1 if ok else 0], device="cuda")
    dist.all_reduce(okt, op=dist.ReduceOp.MIN)
    if rank == 0:
        times.sort()
        print(f"legacy all_gather + broadcast: {sorted(times)[len(times)//2]*1e3:.3f} ms median on rank 0, "
              f"{t.item()*1e3:.3f} ms slowest rank; {world} ranks, {args.sources} sources; bytes {'ok' if okt.item() else 'WRONG'}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
