#!/usr/bin/env python3
"""PyTorch's float8_e4m3fn bits for m2n's quantizer check (issue 16).

Writes, into the directory given as the only argument, little-endian:
  values.f32, scales.f32  n float32 x and s; torch.u8: the bits of
                          (x / s).clamp(-448, 448).to(torch.float8_e4m3fn)
  blocks.bf16             nb blocks of 128 x 128 bf16
  blocks_q.u8, blocks_scale.f32
                          their quantization as docs/ir.md defines it, in
                          PyTorch: amax = |x|.max() per block (float32),
                          scale = amax / 448 (1 when amax is 0),
                          q = (x / scale).clamp(-448, 448).to(float8_e4m3fn)
native's TestGPUFP8Bits (M2N_FP8_DIR) compares m2n's Go reference and its
CUDA kernels with them bit for bit; scripts/gpu-fp8.sh runs both.
"""
import os
import sys

import numpy as np
import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(16)
rng = np.random.default_rng(16)
F8 = torch.float8_e4m3fn


def fp8_bits(t):
    return t.clamp(-448, 448).to(F8).view(torch.uint8)


parts = []
# Random magnitudes over every fp8 binade and past both ends, both signs.
n = 2_000_000
e = torch.randint(-16, 11, (n,), generator=g).float()
m = torch.rand(n, generator=g) + 1
sign = torch.randint(0, 2, (n,), generator=g).float() * 2 - 1
parts.append(torch.ldexp(m, e) * sign)
# Exact midpoints between neighbouring fp8 values (ties), and the values.
codes = torch.arange(0, 0x7F, dtype=torch.uint8).view(F8).float()
mids = (codes[:-1] + codes[1:]) / 2
parts += [mids, -mids, codes, -codes]
# Just above and below each midpoint.
parts += [torch.nextafter(mids, torch.full_like(mids, 1e9)), torch.nextafter(mids, torch.zeros_like(mids))]
# Subnormals, signed zeros, the saturation edge.
parts.append(torch.tensor([0.0, -0.0, 2.0**-9, 2.0**-10, -(2.0**-10), 3 * 2.0**-10, 7 * 2.0**-9, 7.5 * 2.0**-9,
                           2.0**-6, 448.0, -448.0, 449.0, 463.99, 464.0, -464.0, 1e30, -1e30, 2.0**-20, 1e-45]))
# Every finite bf16 the fill pattern makes (the exponent's top bit clear),
# and float32 subnormals.
bf = np.arange(0, 1 << 16, dtype=np.uint32)
bf = bf[(bf & 0x4000) == 0].astype(np.uint16)
parts.append(torch.from_numpy(bf.view(np.int16).copy()).view(torch.bfloat16).float())
parts.append(torch.from_numpy(rng.integers(1, 1 << 23, 100_000, dtype=np.uint32).view(np.float32).copy()))
x = torch.cat(parts).float()
s = torch.ones_like(x)
# Divisions as the quantizer makes them: x / (amax / 448), amax random.
k = 1_500_000
xd = torch.randn(k, generator=g) * torch.ldexp(torch.ones(k), torch.randint(-10, 10, (k,), generator=g))
amax = xd.abs() * (1 + torch.rand(k, generator=g) * 8)
x = torch.cat([x, xd])
s = torch.cat([s, amax / 448])
q = fp8_bits(x / s)
if torch.cuda.is_available():
    qc = fp8_bits((x.cuda() / s.cuda())).cpu()
    print(f"PyTorch CPU and CUDA differ on {(qc != q).sum().item()} of {len(q)} conversions")
x.numpy().astype('<f4').tofile(os.path.join(out, "values.f32"))
s.numpy().astype('<f4').tofile(os.path.join(out, "scales.f32"))
q.numpy().tofile(os.path.join(out, "torch.u8"))
print(f"{len(q)} conversions written")

# Whole blocks: half weight-like (normal, small), half the fill pattern's bf16.
nb = 512
w = (torch.randn(nb // 2, 128, 128, generator=g) * 0.02).to(torch.bfloat16)
pat = rng.integers(0, 1 << 16, (nb // 2, 128, 128), dtype=np.uint32) & 0xBFFF
w2 = torch.from_numpy(pat.astype(np.uint16).view(np.int16)).view(torch.bfloat16)
blocks = torch.cat([w, w2])
blocks[0].zero_()  # an all-zero block: scale 1
xf = blocks.float()
amax = xf.abs().amax(dim=(1, 2))
scale = torch.where(amax == 0, torch.ones_like(amax), amax / 448)
bq = fp8_bits(xf / scale[:, None, None])
blocks.view(torch.int16).numpy().astype('<i2').tofile(os.path.join(out, "blocks.bf16"))
bq.numpy().tofile(os.path.join(out, "blocks_q.u8"))
scale.numpy().astype('<f4').tofile(os.path.join(out, "blocks_scale.f32"))
print(f"{nb} blocks of 128 x 128 written")
