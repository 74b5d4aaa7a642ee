#!/usr/bin/env python3
"""PyTorch's strided copy of the boxes m2n's pack and unpack kernels copy.

Run on a GPU machine with PyTorch: python3 scripts/torch_pack.py
Prints, per box, the time of `dst.copy_(src[box])` (pack) and
`dst[box].copy_(src)` (unpack) and of a plain device copy of the same bytes,
as GB/s counting bytes read plus written: the bar m2n's kernels must clear
(BenchmarkGPUBoxCopy in native/gpu_test.go measures the same boxes).
"""
import torch

CASES = [
    # name, strided array shape, box start, box size (bf16)
    ("paper-pack-box", (16, 2048, 7168), (0, 256, 0), (16, 256, 7168)),
    ("paper-row-slab", (16, 2048, 7168), (0, 0, 1024), (16, 2048, 1024)),
    ("column-block", (8192, 8192), (0, 4096), (8192, 1024)),
    ("narrow-rows", (65536, 4096), (0, 0), (65536, 64)),
    # odd row pitches, as in the kernel benchmark's random boxes
    ("odd-pitch", (38, 2554, 1681), (0, 638, 0), (38, 1277, 1677)),
]


def timed(f, reps=10):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        start.record()
        f()
        stop.record()
        torch.cuda.synchronize()
        ts.append(start.elapsed_time(stop) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"{'box':16s} {'bytes':>10s} {'pack GB/s':>10s} {'unpack GB/s':>12s} {'copy GB/s':>10s}")
    for name, full, start, size in CASES:
        big = torch.randn(full, dtype=torch.bfloat16, device=dev)
        small = torch.empty(size, dtype=torch.bfloat16, device=dev)
        flat = torch.empty(size, dtype=torch.bfloat16, device=dev)
        box = tuple(slice(s, s + n) for s, n in zip(start, size))
        n = small.numel() * small.element_size()
        pack = timed(lambda: small.copy_(big[box]))
        unpack = timed(lambda: big[box].copy_(small))
        copy = timed(lambda: flat.copy_(small))
        gbs = lambda t: 2 * n / t / 1e9
        print(f"{name:16s} {n:10d} {gbs(pack):10.0f} {gbs(unpack):12.0f} {gbs(copy):10.0f}")


if __name__ == "__main__":
    main()
