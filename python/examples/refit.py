#!/usr/bin/env python3
"""A refit inside the job that owns the weights, on 2 GPUs under torchrun.

A Megatron-style trainer at TP2 holds its shards of a Llama-shaped model
(vocab-parallel embeddings and lm_head, column-parallel fused QKV, gate and
up, row-parallel o_proj and down_proj, replicated norms); the generator on
the same two GPUs is TP1 x DP2 and wants every tensor whole on each GPU.
m2n plans the move from both layouts and runs it on the job's own torch
tensors, on torch's current stream, over an NCCL communicator taken from
torch's process group. Every destination byte is compared with the whole
tensor torch made. The fused QKV moves as Megatron lays it out (query
groups in order); reordering it into another framework's layout is the
loader's job, not a reshard.

    torchrun --nproc-per-node 2 python/examples/refit.py [--layers 4] [--ir refit.ir]
    python3 python/examples/refit.py --plan-only     # its CPU half: no GPU, no torch

Prints, on rank 0, the plan's model and SOL, the first call (which checks
the arrays, allocates staging and compiles the kernels) and the median of
--iters refits after --warmup (CUDA events on the stream), and writes the
schedule's IR to --ir so that `m2n run --ir` can time the same schedule.
"""
import argparse
import os
import sys
import time

try:
    import m2n  # installed (pip install --no-build-isolation ./python)
except ImportError:  # or the repository's copy
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import m2n


def model(layers, h, ffn, vocab, heads, kv):
    """(name, shape, the trainer's TP split dim or None) of each tensor."""
    hd = h // heads
    out = [("embed_tokens.weight", [vocab, h], 0)]
    for i in range(layers):
        p = f"layers.{i}."
        out += [(p + "self_attn.qkv_proj.weight", [(heads + 2 * kv) * hd, h], 0),
                (p + "self_attn.o_proj.weight", [h, h], 1),
                (p + "mlp.gate_proj.weight", [ffn, h], 0),
                (p + "mlp.up_proj.weight", [ffn, h], 0),
                (p + "mlp.down_proj.weight", [h, ffn], 1),
                (p + "input_layernorm.weight", [h], None),
                (p + "post_attention_layernorm.weight", [h], None)]
    return out + [("norm.weight", [h], None), ("lm_head.weight", [vocab, h], 0)]


TOPOLOGY = {"preset": "hgx-h200-measured", "gpus_per_domain": 1}


def plan_tensors(layers, world, dims=(4096, 14336, 128256, 32, 8)):
    """The m2n tensors of the model: TP over the world -> whole on each."""
    ranks = list(range(world))
    return [m2n.Tensor(name, shape, "bf16", src=m2n.Layout([world], ranks, ["R" if dim is None else f"S({dim})"]),
                       dst=m2n.Layout([world], ranks, ["R"])) for name, shape, dim in model(layers, *dims)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan-only", action="store_true", help="plan, simulate and check on the host; no GPU, no torch")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dims", default="4096,14336,128256,32,8",
                    help="hidden, ffn, vocab, heads, kv heads (default Llama-3.1-8B's; Qwen2.5-7B: 3584,18944,152064,28,4)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--route", default="flat")
    ap.add_argument("--ir", default="")
    a = ap.parse_args()
    dims = tuple(int(x) for x in a.dims.split(","))
    if len(dims) != 5 or min(dims) <= 0 or dims[0] % dims[3] or dims[3] % dims[4]:
        ap.error(f"--dims {a.dims}: want five positive integers, hidden a multiple of heads and heads of kv heads")
    if a.plan_only:
        with m2n.Plan.from_tensors(plan_tensors(a.layers, 2, dims), TOPOLOGY, route=a.route) as plan:
            rec, ir = plan.simulate(), plan.ir
            print(f"refit plan: {len(ir['tensors'])} tensors, {len(ir['ops'])} ops, route {a.route}: "
                  f"model {rec['modeled_s'] * 1e3:.3f} ms, SOL {rec['sol_s'] * 1e3:.3f} ms on {TOPOLOGY['preset']}")
        # The same shapes, 16x smaller a dim, through the host executor.
        with m2n.Plan.from_tensors(plan_tensors(2, 2, (256, 896, 8016, 2, 1)), TOPOLOGY, route=a.route) as small:
            res = small.check_on_host()
            print(f"refit plan: the model 16x smaller a dim on the host executor: {res['checked_bytes']} bytes checked, {res['wrong_bytes']} wrong")
            return 1 if res["wrong_bytes"] else 0
    import torch
    import torch.distributed as dist
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    assert world == 2, "run on two GPUs: torchrun --nproc-per-node 2"
    tensors, whole, arrays = plan_tensors(a.layers, world, dims), {}, {}
    for k, (name, shape, dim) in enumerate(model(a.layers, *dims)):
        g = torch.Generator(device="cuda").manual_seed(1000 + k)
        full = torch.randn(shape, generator=g, device="cuda", dtype=torch.bfloat16)
        src = full if dim is None else full.chunk(world, dim)[rank].contiguous()
        whole[name] = full
        arrays[name] = {"src": src, "dst": torch.empty_like(full)}
    moved = sum(t.numel() * t.element_size() for t in whole.values())
    try:
        comm, how = m2n.torch_comm(), "borrowed from torch's process group"
    except m2n.M2NError as e:
        comm, how = m2n.new_comm(), f"new, over torch's ranks ({e})"
    stream = torch.cuda.current_stream()
    with m2n.Plan.from_tensors(tensors, TOPOLOGY, route=a.route) as plan:
        rec = plan.simulate()
        if rank == 0 and a.ir:
            import json
            with open(a.ir, "w") as f:
                json.dump(plan.ir, f)
        dist.barrier()
        t0 = time.perf_counter()
        refit = plan.bind(arrays, comm, stream=stream, rank=rank)
        refit()
        stream.synchronize()
        first = time.perf_counter() - t0
        bad = [n for n, t in whole.items() if not torch.equal(arrays[n]["dst"], t)]
        times = []
        for i in range(a.warmup + a.iters):
            for v in arrays.values():
                v["dst"].zero_()
            dist.barrier()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(stream)
            refit()
            e.record(stream)
            e.synchronize()
            if i >= a.warmup:
                times.append(s.elapsed_time(e))
        bad += [n for n, t in whole.items() if not torch.equal(arrays[n]["dst"], t) and n not in bad]
        times.sort()
        t = torch.tensor([times[len(times) // 2], float(len(bad))], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"refit: {len(tensors)} tensors, {moved / 2**30:.2f} GiB a GPU, route {a.route}, communicator {how}")
            print(f"refit: model {rec['modeled_s'] * 1e3:.3f} ms, SOL {rec['sol_s'] * 1e3:.3f} ms (m2n sim of this plan)")
            print(f"refit: first call {first * 1e3:.1f} ms (checks, staging, kernels); median of {a.iters} {t[0].item():.3f} ms "
                  f"(slowest rank; min {times[0]:.3f} ms on rank 0); {int(t[1].item())} tensors wrong")
    dist.destroy_process_group()
    return 1 if t[1].item() else 0


if __name__ == "__main__":
    sys.exit(main())
