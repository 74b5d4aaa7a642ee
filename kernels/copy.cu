// m2n's kernels, compiled at run time by NVRTC (see kernels.go).
// No headers: NVRTC runs without the CUDA toolkit's include files.

#define M2N_MAXD 8

typedef unsigned long long u64;
typedef long long i64;

// BoxArgs describes copying a box between two row-major arrays as runs:
// `runs` contiguous runs of `run_bytes` each, their start offsets spanned by
// `nouter` outer dims of sizes `size` with byte strides `src_stride` and
// `dst_stride` on each side. Work is split in segments of `seg_bytes`.
struct BoxArgs {
    u64 src;          // address of the box's first byte in the source
    u64 dst;          // address of the box's first byte in the destination
    i64 runs;
    i64 run_bytes;
    i64 seg_bytes;
    i64 segs_per_run;
    int nouter;
    int pad;
    i64 size[M2N_MAXD];
    i64 src_stride[M2N_MAXD];
    i64 dst_stride[M2N_MAXD];
};
static_assert(sizeof(BoxArgs) == 248, "BoxArgs is mirrored by package native: change both");

struct v16 { u64 a, b; };

__device__ __forceinline__ void run_offsets(const BoxArgs& a, i64 run, i64* so, i64* dof) {
    i64 s = 0, d = 0, r = run;
    for (int k = a.nouter - 1; k >= 0; --k) {
        i64 i = r % a.size[k];
        r /= a.size[k];
        s += i * a.src_stride[k];
        d += i * a.dst_stride[k];
    }
    *so = s;
    *dof = d;
}

// copy_tail copies the bytes of [lo, hi) past the last whole vector.
__device__ __forceinline__ void copy_tail(const unsigned char* s, unsigned char* t, i64 lo, i64 hi, i64 k, i64 step) {
    for (i64 i = lo + k; i < hi; i += step) t[i] = s[i];
}

// copy_segment copies one segment (unit u = run x segs_per_run + segment)
// of a long-run box copy with the whole thread block.
template <typename V>
__device__ __forceinline__ void copy_segment(const BoxArgs& a, i64 u) {
    i64 run = u / a.segs_per_run;
    i64 seg = u - run * a.segs_per_run;
    i64 so, dof;
    run_offsets(a, run, &so, &dof);
    i64 lo = seg * a.seg_bytes;
    i64 hi = lo + a.seg_bytes;
    if (hi > a.run_bytes) hi = a.run_bytes;
    const V* s = (const V*)(a.src + so + lo);
    V* t = (V*)(a.dst + dof + lo);
    i64 n = (hi - lo) / (i64)sizeof(V);
    i64 k = threadIdx.x;
    // Four independent loads in flight per thread.
    for (; k + 3 * (i64)blockDim.x < n; k += 4 * (i64)blockDim.x) {
        V x0 = s[k], x1 = s[k + blockDim.x], x2 = s[k + 2 * blockDim.x], x3 = s[k + 3 * blockDim.x];
        t[k] = x0;
        t[k + blockDim.x] = x1;
        t[k + 2 * blockDim.x] = x2;
        t[k + 3 * blockDim.x] = x3;
    }
    for (; k < n; k += blockDim.x) t[k] = s[k];
    copy_tail((const unsigned char*)(a.src + so), (unsigned char*)(a.dst + dof), lo + n * (i64)sizeof(V), hi, threadIdx.x, blockDim.x);
}

// Long runs: each block copies one segment of one run at a time.
template <typename V>
__device__ void box_copy_long(const BoxArgs& a) {
    i64 units = a.runs * a.segs_per_run;
    for (i64 u = blockIdx.x; u < units; u += gridDim.x) copy_segment<V>(a, u);
}

// copy_runs copies the whole runs [r0, r1) of a short-run box copy: every
// thread copies vectors of the flattened (run, vector) space from index t
// on in steps of step, four at a time so that four loads are in flight;
// the bytes past each run's last whole vector follow, one byte per thread.
template <typename V>
__device__ __forceinline__ void copy_runs(const BoxArgs& a, i64 r0, i64 r1, i64 t, i64 step) {
    i64 n = a.run_bytes / (i64)sizeof(V);
    i64 total = (r1 - r0) * n;
    for (i64 base = t; base < total; base += 4 * step) {
        V x[4];
        V* dst[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            i64 i = base + u * step;
            dst[u] = 0;
            if (i < total) {
                i64 run = i / n, k = i - run * n;
                i64 so, dof;
                run_offsets(a, r0 + run, &so, &dof);
                x[u] = ((const V*)(a.src + so))[k];
                dst[u] = (V*)(a.dst + dof) + k;
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (dst[u]) *dst[u] = x[u];
    }
    i64 tail = a.run_bytes - n * (i64)sizeof(V);
    if (tail == 0) return;
    for (i64 i = t; i < (r1 - r0) * tail; i += step) {
        i64 run = i / tail, b = n * (i64)sizeof(V) + (i - run * tail);
        i64 so, dof;
        run_offsets(a, r0 + run, &so, &dof);
        ((unsigned char*)(a.dst + dof))[b] = ((const unsigned char*)(a.src + so))[b];
    }
}

// Short runs: the whole grid over every run (copy_runs).
template <typename V>
__device__ void box_copy_short(const BoxArgs& a) {
    copy_runs<V>(a, 0, a.runs, (i64)blockIdx.x * blockDim.x + threadIdx.x, (i64)gridDim.x * blockDim.x);
}

// Misaligned rows (run starts not 16-byte aligned on both sides): a warp
// copies each run in pieces of 4 KiB through shared memory: aligned 16-byte
// loads of the source bytes, then aligned 16-byte stores of the destination,
// each assembled from the staged bytes with funnel shifts.
#define M2N_PIECE 4096
extern "C" __global__ void box_copy_stage(BoxArgs a) {
    __shared__ __align__(16) unsigned char buf[8][M2N_PIECE + 48];
    int lane = threadIdx.x & 31;
    unsigned char* sm = buf[(threadIdx.x >> 5) & 7];
    i64 gw = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    i64 nw = ((i64)gridDim.x * blockDim.x) >> 5;
    i64 pieces = (a.run_bytes + M2N_PIECE - 1) / M2N_PIECE;
    for (i64 u = gw; u < a.runs * pieces; u += nw) {
        i64 run = u / pieces, pc = u - run * pieces;
        i64 so, dof;
        run_offsets(a, run, &so, &dof);
        i64 lo = pc * M2N_PIECE;
        i64 len = a.run_bytes - lo;
        if (len > M2N_PIECE) len = M2N_PIECE;
        u64 s0 = a.src + so + lo, d0 = a.dst + dof + lo;
        u64 sa = s0 & ~15ULL;
        int off = (int)(s0 - sa);
        int nv = (int)((off + len + 15) >> 4);
        for (int k = lane; k < nv; k += 32) ((v16*)sm)[k] = ((const v16*)sa)[k];
        __syncwarp();
        u64 da = (d0 + 15) & ~15ULL;
        i64 head = (i64)(da - d0);
        if (head > len) head = len;
        for (i64 b = lane; b < head; b += 32) ((unsigned char*)d0)[b] = sm[off + b];
        i64 body = (len - head) >> 4;
        for (i64 k = lane; k < body; k += 32) {
            int o = off + (int)head + (int)(k << 4);
            const unsigned int* w = (const unsigned int*)(sm + (o & ~3));
            int sh = (o & 3) * 8;
            unsigned int r0 = __funnelshift_r(w[0], w[1], sh);
            unsigned int r1 = __funnelshift_r(w[1], w[2], sh);
            unsigned int r2 = __funnelshift_r(w[2], w[3], sh);
            unsigned int r3 = __funnelshift_r(w[3], w[4], sh);
            v16 v;
            v.a = (u64)r0 | ((u64)r1 << 32);
            v.b = (u64)r2 | ((u64)r3 << 32);
            ((v16*)da)[k] = v;
        }
        for (i64 b = head + (body << 4) + lane; b < len; b += 32) ((unsigned char*)d0)[b] = sm[off + b];
        __syncwarp();
    }
}

// BatchDesc is one box copy of a batch (package native's batchDesc): its
// BoxArgs, the access width, and how its work is cut in units of about
// 64 KiB: a segment of a long run (runs_per_unit 0), or runs_per_unit
// whole short runs.
struct BatchDesc {
    BoxArgs box;
    i64 runs_per_unit;
    int width;
    int pad;
};
static_assert(sizeof(BatchDesc) == 264, "BatchDesc is mirrored by package native: change both");

// BatchArgs: n descriptors, and prefix[k] the first unit of descriptor k
// (prefix[n] = units, the batch's total).
struct BatchArgs {
    u64 desc;
    u64 prefix;
    i64 n;
    i64 units;
};
static_assert(sizeof(BatchArgs) == 32, "BatchArgs is mirrored by package native: change both");

template <typename V>
__device__ __forceinline__ void batch_unit(const BatchDesc& d, i64 w) {
    if (d.runs_per_unit == 0) {
        copy_segment<V>(d.box, w);
        return;
    }
    i64 r0 = w * d.runs_per_unit;
    i64 r1 = r0 + d.runs_per_unit;
    if (r1 > d.box.runs) r1 = d.box.runs;
    copy_runs<V>(d.box, r0, r1, threadIdx.x, blockDim.x);
}

// batch_unit_at runs unit u of a batch, whose descriptor is *lo or a later
// one (units ascend): lo moves on to it.
__device__ __forceinline__ void batch_unit_at(const BatchDesc* D, const i64* P, int& lo, i64 u) {
    while (P[lo + 1] <= u) ++lo;
    const BatchDesc& d = D[lo];
    i64 w = u - P[lo];
    switch (d.width) {
    case 16: batch_unit<v16>(d, w); break;
    case 8: batch_unit<u64>(d, w); break;
    case 4: batch_unit<unsigned int>(d, w); break;
    case 2: batch_unit<unsigned short>(d, w); break;
    default: batch_unit<unsigned char>(d, w); break;
    }
}

// batch_first is the descriptor of unit u: the last j with P[j] <= u.
__device__ __forceinline__ int batch_first(const i64* P, i64 n, i64 u) {
    int lo = 0, hi = (int)n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (P[mid] <= u) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// box_copy_batch runs many box copies in one launch (the executor's batch
// steps: the packs, unpacks and local copies of one stream that touch
// disjoint bytes). Blocks stride over the units of all descriptors; each
// finds its descriptor by binary search over the prefix array. The
// executor runs it beside NCCL kernels (waves mode).
extern "C" __global__ void box_copy_batch(BatchArgs b) {
    const BatchDesc* D = (const BatchDesc*)b.desc;
    const i64* P = (const i64*)b.prefix;
    for (i64 u = blockIdx.x; u < b.units; u += gridDim.x) {
        int lo = batch_first(P, b.n, u);
        batch_unit_at(D, P, lo, u);
    }
}

// box_copy_batch_ranges is box_copy_batch with each block taking a
// contiguous range of the units: one binary search a block, then it walks
// on. On the whole GPU (streams mode) a batch of 64 boxes ran 15-44%
// faster so; beside NCCL kernels most whole models ran 1.8-8.1% slower
// with it (docs/native.md), so waves mode keeps the striding kernel.
extern "C" __global__ void box_copy_batch_ranges(BatchArgs b) {
    const BatchDesc* D = (const BatchDesc*)b.desc;
    const i64* P = (const i64*)b.prefix;
    const i64 per = (b.units + gridDim.x - 1) / gridDim.x;
    i64 u = (i64)blockIdx.x * per, end = u + per;
    if (end > b.units) end = b.units;
    if (u >= end) return;
    int lo = batch_first(P, b.n, u);
    for (; u < end; ++u) batch_unit_at(D, P, lo, u);
}

extern "C" __global__ void box_copy_long_16(BoxArgs a) { box_copy_long<v16>(a); }
extern "C" __global__ void box_copy_long_8(BoxArgs a) { box_copy_long<u64>(a); }
extern "C" __global__ void box_copy_long_4(BoxArgs a) { box_copy_long<unsigned int>(a); }
extern "C" __global__ void box_copy_long_2(BoxArgs a) { box_copy_long<unsigned short>(a); }
extern "C" __global__ void box_copy_long_1(BoxArgs a) { box_copy_long<unsigned char>(a); }
extern "C" __global__ void box_copy_short_16(BoxArgs a) { box_copy_short<v16>(a); }
extern "C" __global__ void box_copy_short_8(BoxArgs a) { box_copy_short<u64>(a); }
extern "C" __global__ void box_copy_short_4(BoxArgs a) { box_copy_short<unsigned int>(a); }
extern "C" __global__ void box_copy_short_2(BoxArgs a) { box_copy_short<unsigned short>(a); }
extern "C" __global__ void box_copy_short_1(BoxArgs a) { box_copy_short<unsigned char>(a); }

// PatternArgs describes a buffer holding a box of a tensor in row-major
// order: element i of the buffer is the global element whose multi-index is
// start + (the multi-index of i in the box).
struct PatternArgs {
    u64 buf;
    i64 elems;        // elements in the box
    int nd;
    int elem;         // element size in bytes: 1, 2, 4 or 8
    int tensor;       // tensor index, mixed into the pattern
    int flags;        // 1: write the complement; 2: a float dtype, clear the exponent's top bit
    i64 size[M2N_MAXD];
    i64 start[M2N_MAXD];
    i64 gstride[M2N_MAXD]; // elements per index step of each dim in the global tensor
};
static_assert(sizeof(PatternArgs) == 224, "PatternArgs is mirrored by package native: change both");

// pattern is splitmix64 of the tensor and the element's global index; the
// host executor's hostexec.Pattern is the same function. value is an
// element: for a float dtype (flags & 2) the exponent's top bit (bit
// 8 x elem - 2) is cleared so the value is finite (hostexec.Value).
__device__ __forceinline__ u64 pattern(int t, u64 g) {
    u64 z = (u64)t * 0x9E3779B97F4A7C15ULL + g + 0x632BE59BD9B4E019ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ u64 value(const struct PatternArgs& a, u64 g) {
    u64 v = pattern(a.tensor, g);
    if (a.flags & 2) v &= ~(1ULL << (8 * a.elem - 2));
    return v;
}

__device__ __forceinline__ u64 global_index(const PatternArgs& a, i64 i) {
    i64 r = i;
    u64 g = 0;
    for (int d = a.nd - 1; d >= 0; --d) {
        i64 x = r % a.size[d];
        r /= a.size[d];
        g += (u64)(a.start[d] + x) * (u64)a.gstride[d];
    }
    return g;
}

__device__ __forceinline__ u64 load(const unsigned char* p, int elem) {
    switch (elem) {
    case 1: return *p;
    case 2: return *(const unsigned short*)p;
    case 4: return *(const unsigned int*)p;
    default: return *(const u64*)p;
    }
}

__device__ __forceinline__ u64 mask(int elem) {
    return elem >= 8 ? ~0ULL : ((1ULL << (8 * elem)) - 1);
}

extern "C" __global__ void fill(PatternArgs a) {
    i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.elems; i += step) {
        u64 v = value(a, global_index(a, i));
        if (a.flags & 1) v = ~v;
        unsigned char* p = (unsigned char*)a.buf + i * a.elem;
        switch (a.elem) {
        case 1: *p = (unsigned char)v; break;
        case 2: *(unsigned short*)p = (unsigned short)v; break;
        case 4: *(unsigned int*)p = (unsigned int)v; break;
        default: *(u64*)p = v; break;
        }
    }
}

// verify counts the elements of a buffer that differ from the pattern in
// bad[0] and keeps the smallest such element index in bad[1].
extern "C" __global__ void verify(PatternArgs a, u64* bad) {
    i64 step = (i64)gridDim.x * blockDim.x;
    u64 m = mask(a.elem);
    u64 count = 0, first = ~0ULL;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.elems; i += step) {
        u64 want = value(a, global_index(a, i)) & m;
        u64 got = load((const unsigned char*)a.buf + i * a.elem, a.elem);
        if (got != want) {
            count++;
            if ((u64)i < first) first = (u64)i;
        }
    }
    if (count) {
        atomicAdd(&bad[0], count);
        atomicMin(&bad[1], first);
    }
}

// ---- fp8_e4m3 quantization (docs/ir.md, "quantize") ----
//
// The reference is layout.QuantizeBlock in Go: per block, amax = max |x|
// (float32), scale = amax / 448 rounded to nearest (1 when amax is 0), each
// q = to_e4m3(x / scale) with the division rounded to nearest even. The
// intrinsics __fdiv_rn and __fadd_rn keep the arithmetic IEEE whatever the
// compiler flags.

__device__ __forceinline__ float bf16_to_f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }

__device__ __forceinline__ float f16_to_f(unsigned short h) {
    unsigned s = (unsigned)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return __uint_as_float(s | 0x7f800000u | (m << 13));
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-08f; // m x 2^-24, exact
        return s ? -f : f;
    }
    return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
}

// to_e4m3 is layout.ToE4M3: round to nearest even, saturate at +-448, NaN
// to 0x7f with its sign (the quotients the kernels convert are the
// device's canonical NaN, sign clear: layout.QuantizeBlock); PyTorch's c10
// conversion below 464.
__device__ __forceinline__ unsigned char to_e4m3(float f) {
    unsigned b = __float_as_uint(f);
    unsigned char sign = (unsigned char)((b >> 24) & 0x80);
    b &= 0x7fffffffu;
    if (b > 0x7f800000u) return sign | 0x7f;
    if (b >= 0x43e00000u) return sign | 0x7e;
    if (b < (121u << 23)) {
        float s = __fadd_rn(__uint_as_float(b), __uint_as_float(141u << 23));
        return sign | (unsigned char)(__float_as_uint(s) - (141u << 23));
    }
    unsigned odd = (b >> 20) & 1;
    b -= 120u << 23;
    b += 0x7ffffu + odd;
    return sign | (unsigned char)(b >> 20);
}

// to_e4m3x2 converts two floats as to_e4m3 does (b in the low byte): with
// the hardware's cvt.rn.satfinite.e4m3x2.f32 from sm_89 (round to nearest
// even, saturate finite values to +-448, NaN to 0x7f), else in software.
__device__ __forceinline__ unsigned short to_e4m3x2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(a), "f"(b));
    return r;
#else
    return (unsigned short)((unsigned)to_e4m3(a) << 8 | to_e4m3(b));
#endif
}

__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }

__device__ __forceinline__ float quant_scale(float amax) { return amax == 0.0f ? 1.0f : __fdiv_rn(amax, 448.0f); }

// QuantArgs describes quantizing a box whose last two dims hold whole
// blocks: `lead` matrices (the leading dims, sizes in `size`), each rows x
// cols, in blocks of br x bc. Strides are in elements, per side: the
// leading dims', then the row's (columns are contiguous); the scale side's
// are over the scale box (leading dims, then block rows; block columns
// contiguous).
struct QuantArgs {
    u64 src, dst, scale;
    i64 lead, rows, cols, br, bc, nbr, nbc;
    int nlead;
    int sdt; // source dtype: 1 bf16, 2 fp16, 3 fp32
    i64 size[M2N_MAXD];
    i64 src_stride[M2N_MAXD];
    i64 dst_stride[M2N_MAXD];
    i64 scale_stride[M2N_MAXD];
    // work: for the split kernels (quantize_e4m3_split_*), device memory of
    // 2 words a quantization block (their masked and raw amax bits) and a
    // counter, zero before the first launch; the apply kernel's last thread
    // block zeroes it again. Unused by the others.
    u64 work;
};
static_assert(sizeof(QuantArgs) == 352, "QuantArgs is mirrored by package native: change both");

__device__ __forceinline__ float quant_load(const QuantArgs& a, i64 off) {
    switch (a.sdt) {
    case 1: return bf16_to_f(((const unsigned short*)a.src)[off]);
    case 2: return f16_to_f(((const unsigned short*)a.src)[off]);
    default: return ((const float*)a.src)[off];
    }
}

// Loads V consecutive elements at element offset off (16-byte aligned for
// V > 1: 8 of bf16 or fp16, 4 of fp32).
template <int V>
__device__ __forceinline__ void quant_loadv(const QuantArgs& a, i64 off, float* x) {
    if (V == 1) {
        x[0] = quant_load(a, off);
        return;
    }
    union { v16 u; unsigned short h[8]; float f[4]; } w;
    w.u = *(const v16*)((const unsigned char*)a.src + off * (a.sdt == 3 ? 4 : 2));
    for (int k = 0; k < V; ++k) x[k] = a.sdt == 1 ? bf16_to_f(w.h[k]) : a.sdt == 2 ? f16_to_f(w.h[k]) : w.f[k];
}

template <int V>
__device__ __forceinline__ void quant_storev(const QuantArgs& a, i64 off, const unsigned char* q) {
    unsigned char* p = (unsigned char*)a.dst + off;
    if (V == 8) {
        u64 w = 0;
        for (int k = 0; k < 8; ++k) w |= (u64)q[k] << (8 * k);
        *(u64*)p = w;
    } else if (V == 4) {
        unsigned w = 0;
        for (int k = 0; k < 4; ++k) w |= (unsigned)q[k] << (8 * k);
        *(unsigned*)p = w;
    } else {
        for (int k = 0; k < V; ++k) p[k] = q[k];
    }
}

// block_max reduces v over the thread block (blockDim.x a multiple of 32,
// at most 1024); every thread gets the result.
__device__ __forceinline__ float block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[w] = v;
    __syncthreads();
    v = threadIdx.x < (unsigned)nw ? red[threadIdx.x] : 0.0f;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) red[32] = v;
    __syncthreads();
    return red[32];
}

// quant_block_body quantizes one block: nr rows of nv vectors of V
// elements from source element so, to destination byte dof, its scale at
// sat. Two passes over the block's source: its amax, then the bytes (the
// second read mostly hits L2).
template <int V>
__device__ __forceinline__ void quant_block_body(const QuantArgs& a, i64 so, i64 dof, i64 sat, int nr, int nv, float* red) {
    const i64 srow = a.src_stride[a.nlead], drow = a.dst_stride[a.nlead];
    float amax = 0.0f;
    for (int e = threadIdx.x; e < nr * nv; e += blockDim.x) {
        float x[V];
        quant_loadv<V>(a, so + (e / nv) * srow + (e % nv) * V, x);
        for (int q = 0; q < V; ++q) amax = fmaxf(amax, fabsf(x[q]));
    }
    amax = block_max(amax, red);
    float s = quant_scale(amax);
    if (threadIdx.x == 0) ((float*)a.scale)[sat] = s;
    for (int e = threadIdx.x; e < nr * nv; e += blockDim.x) {
        float x[V];
        unsigned char q[V];
        quant_loadv<V>(a, so + (e / nv) * srow + (e % nv) * V, x);
        if (V == 1) {
            q[0] = to_e4m3(__fdiv_rn(x[0], s));
        } else {
            for (int k = 0; k + 1 < V; k += 2) {
                unsigned short p = to_e4m3x2(__fdiv_rn(x[k + 1], s), __fdiv_rn(x[k], s));
                q[k] = (unsigned char)p;
                q[k + 1] = (unsigned char)(p >> 8);
            }
        }
        quant_storev<V>(a, dof + (e / nv) * drow + (e % nv) * V, q);
    }
}

// quant_block is quant_block_body out of line, for the 128 x 128 kernels'
// rare blocks: its registers stay its own.
template <int V>
__device__ __noinline__ void quant_block(const QuantArgs& a, i64 so, i64 dof, i64 sat, int nr, int nv, float* red) {
    quant_block_body<V>(a, so, dof, sat, nr, nv, red);
}

// quantize_e4m3_V: a thread block per quantization block (grid-strided),
// V elements a thread at a time: V = 1 anywhere; V = 8 (bf16, fp16) or 4
// (fp32) when every block row is a whole number of 16-byte-aligned vectors
// on the source and V-byte-aligned on the destination (native checks). Two
// passes over the block's source: its amax, then the bytes (the second
// read mostly hits L2). Each byte is to_e4m3 of the IEEE quotient, as the
// reference: a reciprocal-multiply fast path that falls back to division
// near e4m3 midpoints measured slower on an H200 (docs/native.md).
// quant_lead sets so, dof and sco to the source, destination and scale
// element offsets of lead index l (row-major over the box's lead dims).
__device__ __forceinline__ void quant_lead(const QuantArgs& a, i64 l, i64& so, i64& dof, i64& sco) {
    so = dof = sco = 0;
    for (int k = a.nlead - 1; k >= 0; --k) {
        i64 x = l % a.size[k];
        l /= a.size[k];
        so += x * a.src_stride[k];
        dof += x * a.dst_stride[k];
        sco += x * a.scale_stride[k];
    }
}

template <int V>
__device__ __forceinline__ void quant_generic_at(const QuantArgs& a, i64 b, float* red) {
    const i64 srow = a.src_stride[a.nlead], drow = a.dst_stride[a.nlead];
    i64 j = b % a.nbc, t = b / a.nbc;
    i64 i = t % a.nbr, l = t / a.nbr;
    i64 so, dof, sco;
    quant_lead(a, l, so, dof, sco);
    i64 r0 = i * a.br, c0 = j * a.bc;
    so += r0 * srow + c0;
    dof += r0 * drow + c0;
    const int nr = (int)imin(a.br, a.rows - r0), nv = (int)(imin(a.bc, a.cols - c0) / V);
    quant_block_body<V>(a, so, dof, sco + i * a.scale_stride[a.nlead] + j, nr, nv, red);
}

template <int V>
__device__ void quantize_e4m3(const QuantArgs& a) {
    __shared__ float red[33];
    i64 nblocks = a.lead * a.nbr * a.nbc;
    for (i64 b = blockIdx.x; b < nblocks; b += gridDim.x) quant_generic_at<V>(a, b, red);
}

// QuantBatchArgs: the batch form of a quantize kernel runs many quantize
// ops of one kernel in one launch (the executor's batch steps of
// quantizes): their QuantArgs, n of them, in device memory, and the
// prefix sums of their quantization blocks (prefix[n] = blocks). Blocks
// stride over all the ops' blocks; each finds its op by binary search.
struct QuantBatchArgs {
    u64 args;
    u64 prefix;
    i64 n;
    i64 blocks;
};
static_assert(sizeof(QuantBatchArgs) == 32, "QuantBatchArgs is mirrored by package native: change both");

// qjob is the op of a batch that block b belongs to: the last j with
// P[j] <= b.
__device__ __forceinline__ int qjob(const i64* P, i64 n, i64 b) {
    int lo = 0, hi = (int)n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (P[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

template <int V>
__device__ void quantize_e4m3_batch(const QuantBatchArgs& ba) {
    __shared__ float red[33];
    const QuantArgs* A = (const QuantArgs*)ba.args;
    const i64* P = (const i64*)ba.prefix;
    for (i64 b = blockIdx.x; b < ba.blocks; b += gridDim.x) {
        const int j = qjob(P, ba.n, b);
        quant_generic_at<V>(A[j], b - P[j], red);
    }
}

// ---- the 128 x 128 kernels of 16-bit sources ----
//
// quantize_e4m3_b128_{bf16,fp16} quantize whole-width 128 x 128 blocks
// (rows may end short) of bf16 or fp16, 16-byte aligned rows: the layout of
// DeepSeek-V3's and Kimi-K2's weights, and what the routes quantize. A
// thread block of 128 threads takes a quantization block at a time, a
// thread 16 rows of 8 elements: the block is read once, a thread's sixteen
// loads in flight together, kept in registers, and the next block's loads
// issued before this one is converted. The amax is an integer max of the
// 16-bit magnitudes (their bits order as their values, NaN above
// infinity), the divisions are quant_div below, with no slow path that
// would spill the registers. A block holding a NaN or an infinity, or whose amax is outside
// [2^-100, 2^127], goes to quant_block, the general kernel's code, reading
// the block again. quant_div_check proves the fast arithmetic equal to
// IEEE division for every (x, amax) pair of 16-bit values
// (TestGPUQuantDivision).

// quant_fast_ok says whether a block of this amax (a 16-bit value, its bits
// as a float) takes the fast arithmetic.
__device__ __forceinline__ bool quant_fast_ok(float amax) {
    return amax == 0.0f || (amax >= __int_as_float(27 << 23) && amax <= __int_as_float(254 << 23)); // 2^-100, 2^127
}

// quant_fast_scale is quant_scale(amax) for amax where quant_fast_ok: the
// division by 448 as one reciprocal multiply and two residual corrections.
__device__ __forceinline__ float quant_fast_scale(float amax) {
    if (amax == 0.0f) return 1.0f;
    const float r = 1.0f / 448.0f; // rounded to nearest at compile time
    float y = __fmul_rn(amax, r);
    float e = __fmaf_rn(-y, 448.0f, amax);
    y = __fmaf_rn(e, r, y);
    e = __fmaf_rn(-y, 448.0f, amax);
    return __fmaf_rn(e, r, y);
}

// quant_recip is 1/s to within an ulp, for quant_div: the hardware's
// approximate reciprocal and a Newton step.
__device__ __forceinline__ float quant_recip(float s) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
    return __fmaf_rn(__fmaf_rn(-s, r, 1.0f), r, r);
}

// quant_div is x / s rounded to nearest even, given r = quant_recip(s), for
// s = quant_fast_scale(amax) of an amax where quant_fast_ok (checked
// exhaustively, not claimed beyond): the product x r and one residual
// correction (Markstein). The residual is taken as y s - x so that a zero
// keeps its sign.
__device__ __forceinline__ float quant_div(float x, float s, float r) {
    float y = __fmul_rn(x, r);
    return __fmaf_rn(-__fmaf_rn(y, s, -x), r, y);
}

__device__ __forceinline__ float f16_bits_to_f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

template <int SDT>
__device__ __forceinline__ float h16_to_f(unsigned short h) { return SDT == 1 ? bf16_to_f(h) : f16_bits_to_f(h); }

__device__ __forceinline__ unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }

// umax16x2 is the max of each 16-bit half.
__device__ __forceinline__ unsigned umax16x2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned r;
    asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return umax(a & 0xffffu, b & 0xffffu) | umax(a >> 16, b >> 16) << 16;
#endif
}

struct u32x4 { unsigned x, y, z, w; };

// ldg16 loads 16 aligned bytes through the read-only path.
__device__ __forceinline__ u32x4 ldg16(const void* p) {
    u32x4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// The 8 bytes of one 16-byte vector: element k of the vector in byte k.
template <int SDT>
__device__ __forceinline__ void quant_vec(const u32x4& v, float s, float r, unsigned* out) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    unsigned p[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float lo, hi;
        if (SDT == 1) {
            lo = __uint_as_float(w[k] << 16);
            hi = __uint_as_float(w[k] & 0xffff0000u);
        } else {
            lo = f16_bits_to_f((unsigned short)(w[k] & 0xffffu));
            hi = f16_bits_to_f((unsigned short)(w[k] >> 16));
        }
        p[k] = to_e4m3x2(quant_div(hi, s, r), quant_div(lo, s, r));
    }
    out[0] = p[0] | p[1] << 16;
    out[1] = p[2] | p[3] << 16;
}

// QBlock is where quantization block b of a box lies: its first source
// element and destination byte, its scale, and its rows.
struct QBlock {
    i64 so, dof, sat;
    int nr;
};

// qblock_at locates block b in 32-bit arithmetic (planQuantArrays takes
// these kernels only for boxes of fewer than 2^31 blocks and dims).
__device__ __forceinline__ QBlock qblock_at(const QuantArgs& a, unsigned b) {
    QBlock q;
    const unsigned nbc = (unsigned)a.nbc, nbr = (unsigned)a.nbr;
    unsigned j = b % nbc, t = b / nbc;
    unsigned i = t % nbr, l = t / nbr;
    i64 so = 0, dof = 0, sco = 0;
    for (int k = a.nlead - 1; k >= 0; --k) {
        unsigned sz = (unsigned)a.size[k], x = l % sz;
        l /= sz;
        so += x * a.src_stride[k];
        dof += x * a.dst_stride[k];
        sco += x * a.scale_stride[k];
    }
    const i64 r0 = (i64)i * 128, c0 = (i64)j * 128;
    q.so = so + r0 * a.src_stride[a.nlead] + c0;
    q.dof = dof + r0 * a.dst_stride[a.nlead] + c0;
    q.sat = sco + (i64)i * a.scale_stride[a.nlead] + j;
    q.nr = (int)imin(128, a.rows - r0);
    return q;
}

// T threads a block, R = 2048 / T vectors a thread: rows tr + (T/16) k.
template <int T>
__device__ __forceinline__ void qload(const QuantArgs& a, const QBlock& q, u32x4* w) {
    constexpr int R = 2048 / T;
    const int tv = threadIdx.x & 15, tr = threadIdx.x >> 4;
    const unsigned short* src = (const unsigned short*)a.src + q.so + tv * 8;
    const i64 srow = a.src_stride[a.nlead];
#pragma unroll
    for (int k = 0; k < R; ++k) {
        int row = tr + (T / 16) * k;
        w[k] = row < q.nr ? ldg16(src + row * srow) : u32x4{0, 0, 0, 0};
    }
}

// block_amax16 reduces each thread's packed 16-bit magnitudes m (two a
// word) to the largest over the thread block of T threads, for every
// thread; ured holds a word a warp.
template <int T>
__device__ __forceinline__ unsigned block_amax16(unsigned m, unsigned* ured) {
    m = umax(m & 0xffffu, m >> 16);
    for (int o = 16; o > 0; o >>= 1) m = umax(m, __shfl_xor_sync(0xffffffffu, m, o));
    __syncthreads(); // the previous block's readers of ured are done
    if ((threadIdx.x & 31) == 0) ured[threadIdx.x >> 5] = m;
    __syncthreads();
    m = ured[0];
#pragma unroll
    for (int k = 1; k < T / 32; ++k) m = umax(m, ured[k]);
    return m;
}

template <int SDT, int T>
__device__ __forceinline__ void qprocess(const QuantArgs& a, const QBlock& q, const u32x4* w, unsigned* ured, float* red) {
    constexpr int R = 2048 / T;
    const unsigned nan_above = SDT == 1 ? 0x7f80u : 0x7c00u;
    // Four independent chains of maxes, then theirs.
    unsigned mx = 0, my = 0, mz = 0, mw = 0;
#pragma unroll
    for (int k = 0; k < R; ++k) {
        mx = umax16x2(mx, w[k].x & 0x7fff7fffu);
        my = umax16x2(my, w[k].y & 0x7fff7fffu);
        mz = umax16x2(mz, w[k].z & 0x7fff7fffu);
        mw = umax16x2(mw, w[k].w & 0x7fff7fffu);
    }
    const unsigned m = block_amax16<T>(umax16x2(umax16x2(mx, my), umax16x2(mz, mw)), ured);
    const float amax = h16_to_f<SDT>((unsigned short)m);
    if (m > nan_above || !quant_fast_ok(amax)) {
        quant_block<8>(a, q.so, q.dof, q.sat, q.nr, 16, red);
        return;
    }
    const float s = quant_fast_scale(amax), r = quant_recip(s);
    if (threadIdx.x == 0) ((float*)a.scale)[q.sat] = s;
    const int tv = threadIdx.x & 15, tr = threadIdx.x >> 4;
    unsigned char* dst = (unsigned char*)a.dst + q.dof + tv * 8;
    const i64 drow = a.dst_stride[a.nlead];
#pragma unroll
    for (int k = 0; k < R; ++k) {
        int row = tr + (T / 16) * k;
        if (row < q.nr) {
            unsigned o[2];
            quant_vec<SDT>(w[k], s, r, o);
            asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst + row * drow), "r"(o[0]), "r"(o[1]) : "memory");
        }
    }
}

// quantize_b128: grid-strided over the blocks (planQuantArrays launches
// two thread blocks a multiprocessor, each taking an equal share), the
// next block's loads issued before the current block is converted. Loading
// two blocks ahead, 256 threads, one thread block per quantization block,
// more or fewer thread blocks per multiprocessor, and an L2 prefetch hint
// all measured slower on an H200 (docs/native.md).
template <int SDT, int T>
__device__ void quantize_b128(const QuantArgs& a) {
    constexpr int R = 2048 / T;
    __shared__ unsigned ured[T / 32];
    __shared__ float red[33];
    const unsigned nblocks = (unsigned)(a.lead * a.nbr * a.nbc);
    unsigned b = blockIdx.x;
    if (b >= nblocks) return;
    QBlock q = qblock_at(a, b);
    u32x4 w[R];
    qload<T>(a, q, w);
    for (;;) {
        const unsigned bn = b + gridDim.x;
        QBlock qn;
        u32x4 wn[R];
        if (bn < nblocks) {
            qn = qblock_at(a, bn);
            qload<T>(a, qn, wn);
        }
        qprocess<SDT, T>(a, q, w, ured, red);
        if (bn >= nblocks) return;
        q = qn;
#pragma unroll
        for (int k = 0; k < R; ++k) w[k] = wn[k];
        b = bn;
    }
}

extern "C" __global__ void __launch_bounds__(128) quantize_e4m3_b128_bf16(QuantArgs a) { quantize_b128<1, 128>(a); }
extern "C" __global__ void __launch_bounds__(128) quantize_e4m3_b128_fp16(QuantArgs a) { quantize_b128<2, 128>(a); }

// quantize_b128_batch is quantize_b128 over the blocks of a batch's ops
// (QuantBatchArgs), the next block's loads, of whichever op it is, issued
// before the current block is converted. The executor batches these
// kernels only where the blocks number fewer than 2^31.
template <int SDT, int T>
__device__ void quantize_b128_batch(const QuantBatchArgs& ba) {
    constexpr int R = 2048 / T;
    __shared__ unsigned ured[T / 32];
    __shared__ float red[33];
    const QuantArgs* A = (const QuantArgs*)ba.args;
    const i64* P = (const i64*)ba.prefix;
    const unsigned nblocks = (unsigned)ba.blocks;
    unsigned b = blockIdx.x;
    if (b >= nblocks) return;
    int j = qjob(P, ba.n, b);
    QBlock q = qblock_at(A[j], b - (unsigned)P[j]);
    u32x4 w[R];
    qload<T>(A[j], q, w);
    for (;;) {
        const unsigned bn = b + gridDim.x;
        int jn = j;
        QBlock qn;
        u32x4 wn[R];
        if (bn < nblocks) {
            jn = qjob(P, ba.n, bn);
            qn = qblock_at(A[jn], bn - (unsigned)P[jn]);
            qload<T>(A[jn], qn, wn);
        }
        qprocess<SDT, T>(A[j], q, w, ured, red);
        if (bn >= nblocks) return;
        q = qn;
        j = jn;
#pragma unroll
        for (int k = 0; k < R; ++k) w[k] = wn[k];
        b = bn;
    }
}

extern "C" __global__ void __launch_bounds__(128) quantize_e4m3_b128_bf16_batch(QuantBatchArgs a) { quantize_b128_batch<1, 128>(a); }
extern "C" __global__ void __launch_bounds__(128) quantize_e4m3_b128_fp16_batch(QuantBatchArgs a) { quantize_b128_batch<2, 128>(a); }

// ---- the split kernels: few large blocks of 16-bit sources ----
//
// quantize_e4m3_split_{bf16,fp16}_{amax,apply} quantize blocks too large
// for one thread block to take alone (per tensor, per expert: one block of
// millions of elements; the generic kernel ran a [7168, 8192] bf16 tensor
// in 84 ms on one thread block). Two launches over tiles, a tile one row of
// one block's columns (lead slice l, row r, column block j): amax reduces
// each tile's 16-bit magnitudes (integer max: their bits order as their
// values) and adds them to its block's two words of work by atomicMax,
// NaNs masked in the first (fmaxf's amax, as the reference) and counted in
// the second; apply then converts each tile with its block's scale, the
// tile at the block's first row writing it. A block holding a NaN, or
// whose amax is outside quant_fast_ok, takes the reference's IEEE
// division; the others quant_div, proven equal to it (TestGPUQuantDivision).
// Sources are 16-byte aligned vectors of 8 elements (planQuantArrays
// checks), 256 threads a thread block.

// QTile is where tile t of a box lies: its first source element, its first
// destination byte, its block's index (for work) and its scale's element
// offset, its width in vectors, and whether it is its block's first row.
struct QTile {
    i64 so, dof, blk, sat;
    int nv;
    bool first;
};

__device__ __forceinline__ QTile qtile_at(const QuantArgs& a, i64 t) {
    QTile q;
    i64 j = t % a.nbc, u = t / a.nbc;
    i64 r = u % a.rows, l = u / a.rows;
    i64 so, dof, sco;
    quant_lead(a, l, so, dof, sco);
    const i64 c0 = j * a.bc, i = r / a.br;
    q.so = so + r * a.src_stride[a.nlead] + c0;
    q.dof = dof + r * a.dst_stride[a.nlead] + c0;
    q.sat = sco + i * a.scale_stride[a.nlead] + j;
    q.blk = (l * a.nbr + i) * a.nbc + j;
    q.nv = (int)(imin(a.bc, a.cols - c0) / 8);
    q.first = r % a.br == 0;
    return q;
}

// each_vec16 calls f(w, v) on each of a tile's nv 16-byte vectors at src
// that this thread takes (v from threadIdx.x in steps of 256 threads),
// four loads in flight a thread: all four are issued before f runs on the
// first (a store's memory clobber in f keeps any later load behind it).
// The split apply kernel and both passes of the row kernels read so.
template <typename F>
__device__ __forceinline__ void each_vec16(const unsigned short* src, int nv, F f) {
    int v = threadIdx.x;
    for (; v + 3 * 256 < nv; v += 4 * 256) {
        u32x4 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = ldg16(src + (v + k * 256) * 8);
#pragma unroll
        for (int k = 0; k < 4; ++k) f(w[k], v + k * 256);
    }
    for (; v < nv; v += 256) f(ldg16(src + v * 8), v);
}

// split_reduce2 reduces (m, raw) by max over the thread block (256
// threads); thread 0 gets the result.
__device__ __forceinline__ void split_reduce2(unsigned& m, unsigned& raw, unsigned* sh) {
    for (int o = 16; o > 0; o >>= 1) {
        m = umax(m, __shfl_xor_sync(0xffffffffu, m, o));
        raw = umax(raw, __shfl_xor_sync(0xffffffffu, raw, o));
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        sh[threadIdx.x >> 5] = m;
        sh[8 + (threadIdx.x >> 5)] = raw;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 1; k < 8; ++k) {
            m = umax(m, sh[k]);
            raw = umax(raw, sh[8 + k]);
        }
}

template <int SDT>
__device__ void quantize_split_amax(const QuantArgs& a) {
    __shared__ unsigned sh[16];
    unsigned* work = (unsigned*)a.work;
    const unsigned nan_above = SDT == 1 ? 0x7f80u : 0x7c00u;
    const i64 tiles = a.lead * a.rows * a.nbc;
    // A thread block's running maxes, flushed when its block changes.
    i64 cur = -1;
    unsigned m = 0, raw = 0;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const QTile q = qtile_at(a, t);
        if (q.blk != cur) {
            if (cur >= 0) {
                split_reduce2(m, raw, sh);
                if (threadIdx.x == 0) {
                    atomicMax(&work[2 * cur], m);
                    atomicMax(&work[2 * cur + 1], raw);
                }
            }
            cur = q.blk;
            m = 0;
            raw = 0;
        }
        const unsigned short* src = (const unsigned short*)a.src + q.so;
        for (int v = threadIdx.x; v < q.nv; v += 256) {
            const u32x4 w = ldg16(src + v * 8);
            const unsigned h[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const unsigned lo = h[k] & 0x7fffu, hi = (h[k] >> 16) & 0x7fffu;
                raw = umax(raw, umax(lo, hi));
                m = umax(m, umax(lo > nan_above ? 0u : lo, hi > nan_above ? 0u : hi));
            }
        }
    }
    if (cur >= 0) {
        split_reduce2(m, raw, sh);
        if (threadIdx.x == 0) {
            atomicMax(&work[2 * cur], m);
            atomicMax(&work[2 * cur + 1], raw);
        }
    }
}

// split_store converts one vector of 8 elements by scale s (r its
// reciprocal): the fast division where fast, IEEE division otherwise, and
// stores the 8 bytes at dst.
template <int SDT>
__device__ __forceinline__ void split_store(const u32x4& w, bool fast, float s, float r, unsigned char* dst) {
    unsigned o[2];
    if (fast) {
        quant_vec<SDT>(w, s, r, o);
    } else {
        const unsigned h[4] = {w.x, w.y, w.z, w.w};
        unsigned p[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            p[k] = to_e4m3x2(__fdiv_rn(h16_to_f<SDT>((unsigned short)(h[k] >> 16)), s), __fdiv_rn(h16_to_f<SDT>((unsigned short)(h[k] & 0xffffu)), s));
        o[0] = p[0] | p[1] << 16;
        o[1] = p[2] | p[3] << 16;
    }
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(o[0]), "r"(o[1]) : "memory");
}

template <int SDT>
__device__ void quantize_split_apply(const QuantArgs& a) {
    unsigned* work = (unsigned*)a.work;
    const unsigned nan_above = SDT == 1 ? 0x7f80u : 0x7c00u;
    const i64 tiles = a.lead * a.rows * a.nbc;
    const i64 nblocks = a.lead * a.nbr * a.nbc;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const QTile q = qtile_at(a, t);
        const unsigned mb = work[2 * q.blk], rawb = work[2 * q.blk + 1];
        const float amax = h16_to_f<SDT>((unsigned short)mb);
        const bool fast = rawb <= nan_above && quant_fast_ok(amax);
        const float s = fast ? quant_fast_scale(amax) : quant_scale(amax);
        const float r = quant_recip(s);
        if (q.first && threadIdx.x == 0) ((float*)a.scale)[q.sat] = s;
        unsigned char* dst = (unsigned char*)a.dst + q.dof;
        each_vec16((const unsigned short*)a.src + q.so, q.nv, [&](const u32x4& w, int v) { split_store<SDT>(w, fast, s, r, dst + v * 8); });
    }
    // The last thread block to finish zeroes the work for the next launch:
    // every other has read its blocks' words by then.
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(&work[2 * nblocks], 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
        __threadfence();
        for (i64 k = threadIdx.x; k <= 2 * nblocks; k += blockDim.x) work[k] = 0;
    }
}

extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_split_bf16_amax(QuantArgs a) { quantize_split_amax<1>(a); }
extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_split_fp16_amax(QuantArgs a) { quantize_split_amax<2>(a); }
extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_split_bf16_apply(QuantArgs a) { quantize_split_apply<1>(a); }
extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_split_fp16_apply(QuantArgs a) { quantize_split_apply<2>(a); }

// ---- the row kernels: blocks of one row of 16-bit sources ----
//
// quantize_e4m3_rows_{bf16,fp16} quantize blocks of one row (per-channel
// scales: a scale a row; or 1 x bc blocks) of 16-bit sources in 16-byte
// vectors: a thread block of 256 threads a block, grid-strided. The amax
// pass is an integer max of the magnitudes (NaN masked: a NaN sends the
// block to quant_block, the reference's code), four loads in flight a
// thread; the second pass reads the row again (from L2) and converts with
// quant_div, proven equal to IEEE division (TestGPUQuantDivision). Each
// block is one of qtile_at's tiles (a row of a block's columns). The
// generic kernel spent 241 us on a [7168, 8192] bf16 tensor in per-channel
// scales, mostly in IEEE divisions.

template <int SDT>
__device__ __forceinline__ void quant_row(const QuantArgs& a, const QTile& q, unsigned* ured, float* red) {
    const unsigned nan_above = SDT == 1 ? 0x7f80u : 0x7c00u;
    const unsigned short* src = (const unsigned short*)a.src + q.so;
    unsigned m = 0;
    each_vec16(src, q.nv, [&](const u32x4& w, int) {
        m = umax16x2(m, umax16x2(umax16x2(w.x & 0x7fff7fffu, w.y & 0x7fff7fffu), umax16x2(w.z & 0x7fff7fffu, w.w & 0x7fff7fffu)));
    });
    m = block_amax16<256>(m, ured);
    const float amax = h16_to_f<SDT>((unsigned short)m);
    if (m > nan_above || !quant_fast_ok(amax)) {
        quant_block<8>(a, q.so, q.dof, q.sat, 1, q.nv, red);
        return;
    }
    const float s = quant_fast_scale(amax), r = quant_recip(s);
    if (threadIdx.x == 0) ((float*)a.scale)[q.sat] = s;
    unsigned char* dst = (unsigned char*)a.dst + q.dof;
    each_vec16(src, q.nv, [&](const u32x4& w, int v) {
        unsigned o[2];
        quant_vec<SDT>(w, s, r, o);
        asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst + v * 8), "r"(o[0]), "r"(o[1]) : "memory");
    });
}

template <int SDT>
__device__ void quantize_rows(const QuantArgs& a) {
    __shared__ unsigned ured[8];
    __shared__ float red[33];
    const i64 nblocks = a.lead * a.rows * a.nbc;
    for (i64 b = blockIdx.x; b < nblocks; b += gridDim.x) quant_row<SDT>(a, qtile_at(a, b), ured, red); // a block a row: tiles are blocks
}

template <int SDT>
__device__ void quantize_rows_batch(const QuantBatchArgs& ba) {
    __shared__ unsigned ured[8];
    __shared__ float red[33];
    const QuantArgs* A = (const QuantArgs*)ba.args;
    const i64* P = (const i64*)ba.prefix;
    for (i64 b = blockIdx.x; b < ba.blocks; b += gridDim.x) {
        const int j = qjob(P, ba.n, b);
        quant_row<SDT>(A[j], qtile_at(A[j], b - P[j]), ured, red);
    }
}

extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_rows_bf16(QuantArgs a) { quantize_rows<1>(a); }
extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_rows_fp16(QuantArgs a) { quantize_rows<2>(a); }
extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_rows_bf16_batch(QuantBatchArgs a) { quantize_rows_batch<1>(a); }
extern "C" __global__ void __launch_bounds__(256) quantize_e4m3_rows_fp16_batch(QuantBatchArgs a) { quantize_rows_batch<2>(a); }

// QuantDivArgs: quant_div_check counts, over every pair of 16-bit values
// (x, amax) of dtype sdt (1 bf16, 2 fp16) with amax a non-negative
// magnitude where quant_fast_ok, the pairs where quant_fast_scale differs
// from quant_scale (bad[0], counted once per amax) or the e4m3 byte of
// quant_div from that of the IEEE quotient (bad[1]), and the pairs
// checked (bad[2]).
struct QuantDivArgs {
    u64 bad;
    int sdt;
};

template <int SDT>
__device__ void quant_div_check_t(const QuantDivArgs& a) {
    unsigned long long* bad = (unsigned long long*)a.bad;
    unsigned long long nscale = 0, nbyte = 0, n = 0;
    const unsigned nan_above = SDT == 1 ? 0x7f80u : 0x7c00u;
    for (unsigned am = blockIdx.x; am <= nan_above; am += gridDim.x) {
        float amax = h16_to_f<SDT>((unsigned short)am);
        if (!quant_fast_ok(amax)) continue;
        float s = quant_fast_scale(amax), r = quant_recip(s), ref = quant_scale(amax);
        if (threadIdx.x == 0 && __float_as_uint(s) != __float_as_uint(ref)) ++nscale;
        // x of either sign, |x| <= amax: what a block of this amax holds
        for (unsigned k = threadIdx.x; k <= 2 * am + 1; k += blockDim.x) {
            unsigned xb = (k >> 1) | (k & 1) << 15;
            float x = h16_to_f<SDT>((unsigned short)xb);
            unsigned short p = to_e4m3x2(quant_div(x, s, r), __fdiv_rn(x, ref));
            if ((p & 0xff) != (p >> 8)) ++nbyte;
            ++n;
        }
    }
    atomicAdd(&bad[0], nscale);
    atomicAdd(&bad[1], nbyte);
    atomicAdd(&bad[2], n);
}

extern "C" __global__ void quant_div_check(QuantDivArgs a) {
    if (a.sdt == 1) quant_div_check_t<1>(a);
    else quant_div_check_t<2>(a);
}

extern "C" __global__ void quantize_e4m3_1(QuantArgs a) { quantize_e4m3<1>(a); }
extern "C" __global__ void quantize_e4m3_4(QuantArgs a) { quantize_e4m3<4>(a); }
extern "C" __global__ void quantize_e4m3_8(QuantArgs a) { quantize_e4m3<8>(a); }
extern "C" __global__ void quantize_e4m3_1_batch(QuantBatchArgs a) { quantize_e4m3_batch<1>(a); }
extern "C" __global__ void quantize_e4m3_4_batch(QuantBatchArgs a) { quantize_e4m3_batch<4>(a); }
extern "C" __global__ void quantize_e4m3_8_batch(QuantBatchArgs a) { quantize_e4m3_batch<8>(a); }


// QuantCheckArgs describes an output of a quantized tensor to verify: the
// fp8 bytes of a block-aligned global box of the weight (scales = 0), or
// the scales of its blocks (scales = 1), both row-major. The expected
// values are recomputed from the source pattern (flags as PatternArgs'),
// so the check is independent of the schedule.
struct QuantCheckArgs {
    u64 buf;
    int tensor;
    int sdt;   // 1 bf16, 2 fp16, 3 fp32
    int nd;
    int scales;
    i64 br, bc;
    i64 start[M2N_MAXD];
    i64 size[M2N_MAXD];
    i64 gstride[M2N_MAXD];
    // work: for verify_quant_amax and verify_quant_tiles, a word a
    // quantization block (its amax's bits), zero before the first.
    u64 work;
    // The fp8 bytes the buffer holds: the global box hstart + [0, hsize),
    // row-major, inside the box above, which covers its whole blocks (a
    // row-parallel shard of per-channel or per-tensor scales cuts them:
    // the box's elements outside it count in the amax only). Equal to the
    // box when it cuts none; not read for scales.
    i64 hstart[M2N_MAXD];
    i64 hsize[M2N_MAXD];
};
static_assert(sizeof(QuantCheckArgs) == 368, "QuantCheckArgs is mirrored by package native: change both");

__device__ __forceinline__ float check_value(const QuantCheckArgs& a, const i64* idx) {
    u64 g = 0;
    for (int d = 0; d < a.nd; ++d) g += (u64)(a.start[d] + idx[d]) * (u64)a.gstride[d];
    u64 v = pattern(a.tensor, g);
    int elem = a.sdt == 3 ? 4 : 2;
    v &= ~(1ULL << (8 * elem - 2));
    return a.sdt == 1 ? bf16_to_f((unsigned short)v) : a.sdt == 2 ? f16_to_f((unsigned short)v) : __uint_as_float((unsigned)v);
}

// check_held reports whether the element at idx (within the box) is one
// the buffer holds, and its byte's index there in at.
__device__ __forceinline__ bool check_held(const QuantCheckArgs& a, const i64* idx, i64& at) {
    i64 o = 0;
    for (int d = 0; d < a.nd; ++d) {
        i64 h = a.start[d] + idx[d] - a.hstart[d];
        if (h < 0 || h >= a.hsize[d]) return false;
        o = o * a.hsize[d] + h;
    }
    at = o;
    return true;
}

// vq_geom is a check's box in blocks: its rows and columns (the last two
// dims), its blocks down and across, and the product of its lead dims.
__device__ __forceinline__ void vq_geom(const QuantCheckArgs& a, i64& rows, i64& cols, i64& nbr, i64& nbc, i64& lead) {
    const int nd = a.nd;
    rows = a.size[nd - 2];
    cols = a.size[nd - 1];
    nbr = (rows + a.br - 1) / a.br;
    nbc = (cols + a.bc - 1) / a.bc;
    lead = 1;
    for (int d = 0; d < nd - 2; ++d) lead *= a.size[d];
}

// vq_bad counts a wrong byte or scale at index at.
__device__ __forceinline__ void vq_bad(u64 at, u64& count, u64& first) {
    count++;
    if (at < first) first = at;
}

// vq_byte checks the fp8 byte of the element at idx, where the buffer
// holds it, against the quantizer at scale s.
__device__ __forceinline__ void vq_byte(const QuantCheckArgs& a, const i64* idx, float s, u64& count, u64& first) {
    i64 at;
    if (check_held(a, idx, at) && ((const unsigned char*)a.buf)[at] != to_e4m3(__fdiv_rn(check_value(a, idx), s))) {
        vq_bad((u64)at, count, first);
    }
}

// vq_flush adds a thread's wrong bytes or scales to bad[0] and its
// smallest wrong index to bad[1].
__device__ __forceinline__ void vq_flush(u64* bad, u64 count, u64 first) {
    if (count) {
        atomicAdd(&bad[0], count);
        atomicMin(&bad[1], first);
    }
}

// verify_quant counts wrong fp8 bytes (or scales) in bad[0] and keeps the
// smallest wrong index in bad[1]; a thread block per quantization block.
extern "C" __global__ void verify_quant(QuantCheckArgs a, u64* bad) {
    __shared__ float red[33];
    const int nd = a.nd;
    i64 rows, cols, nbr, nbc, lead;
    vq_geom(a, rows, cols, nbr, nbc, lead);
    u64 count = 0, first = ~0ULL;
    for (i64 b = blockIdx.x; b < lead * nbr * nbc; b += gridDim.x) {
        i64 j = b % nbc, t = b / nbc;
        i64 i = t % nbr, l = t / nbr;
        i64 idx[M2N_MAXD];
        i64 r = l;
        for (int d = nd - 3; d >= 0; --d) {
            idx[d] = r % a.size[d];
            r /= a.size[d];
        }
        i64 r0 = i * a.br, c0 = j * a.bc;
        i64 nr = imin(a.br, rows - r0), nc = imin(a.bc, cols - c0);
        float amax = 0.0f;
        for (i64 e = threadIdx.x; e < nr * nc; e += blockDim.x) {
            idx[nd - 2] = r0 + e / nc;
            idx[nd - 1] = c0 + e % nc;
            amax = fmaxf(amax, fabsf(check_value(a, idx)));
        }
        amax = block_max(amax, red);
        float s = quant_scale(amax);
        if (a.scales) {
            i64 at = (l * nbr + i) * nbc + j;
            if (threadIdx.x == 0 && __float_as_uint(((const float*)a.buf)[at]) != __float_as_uint(s)) vq_bad((u64)at, count, first);
            continue;
        }
        for (i64 e = threadIdx.x; e < nr * nc; e += blockDim.x) {
            idx[nd - 2] = r0 + e / nc;
            idx[nd - 1] = c0 + e % nc;
            vq_byte(a, idx, s, count, first);
        }
    }
    vq_flush(bad, count, first);
}

// verify_quant_amax and verify_quant_tiles are verify_quant for blocks
// too large for a thread block each (the split kernels' blocks: per
// tensor, per expert), over tiles, a row of a block's columns each: the
// first puts each block's amax in work (atomicMax of the bits of a finite
// non-negative float, which order as its value), the second checks each
// tile's bytes, or, at a block's first row, its scale.
__device__ __forceinline__ void vq_tile(const QuantCheckArgs& a, i64 t, i64 rows, i64 cols, i64 nbr, i64 nbc, i64* idx, i64& blk, i64& r, i64& c0, i64& nc) {
    const int nd = a.nd;
    i64 j = t % nbc, u = t / nbc;
    r = u % rows;
    i64 l = u / rows, rest = l;
    for (int d = nd - 3; d >= 0; --d) {
        idx[d] = rest % a.size[d];
        rest /= a.size[d];
    }
    c0 = j * a.bc;
    nc = imin(a.bc, cols - c0);
    blk = (l * nbr + r / a.br) * nbc + j;
    idx[nd - 2] = r;
}

extern "C" __global__ void verify_quant_amax(QuantCheckArgs a, u64* bad) {
    __shared__ float red[33];
    const int nd = a.nd;
    i64 rows, cols, nbr, nbc, lead;
    vq_geom(a, rows, cols, nbr, nbc, lead);
    for (i64 t = blockIdx.x; t < lead * rows * nbc; t += gridDim.x) {
        i64 idx[M2N_MAXD], blk, r, c0, nc;
        vq_tile(a, t, rows, cols, nbr, nbc, idx, blk, r, c0, nc);
        float amax = 0.0f;
        for (i64 e = threadIdx.x; e < nc; e += blockDim.x) {
            idx[nd - 1] = c0 + e;
            amax = fmaxf(amax, fabsf(check_value(a, idx)));
        }
        amax = block_max(amax, red);
        if (threadIdx.x == 0) atomicMax((unsigned*)a.work + blk, __float_as_uint(amax));
    }
}

extern "C" __global__ void verify_quant_tiles(QuantCheckArgs a, u64* bad) {
    const int nd = a.nd;
    i64 rows, cols, nbr, nbc, lead;
    vq_geom(a, rows, cols, nbr, nbc, lead);
    u64 count = 0, first = ~0ULL;
    for (i64 t = blockIdx.x; t < lead * rows * nbc; t += gridDim.x) {
        i64 idx[M2N_MAXD], blk, r, c0, nc;
        vq_tile(a, t, rows, cols, nbr, nbc, idx, blk, r, c0, nc);
        const float s = quant_scale(__uint_as_float(((const unsigned*)a.work)[blk]));
        if (a.scales) {
            if (r % a.br == 0 && threadIdx.x == 0 && __float_as_uint(((const float*)a.buf)[blk]) != __float_as_uint(s)) vq_bad((u64)blk, count, first);
            continue;
        }
        for (i64 e = threadIdx.x; e < nc; e += blockDim.x) {
            idx[nd - 1] = c0 + e;
            vq_byte(a, idx, s, count, first);
        }
    }
    vq_flush(bad, count, first);
}

// e4m3_convert writes to_e4m3(x[i] / s[i]) for n values: the bit-equality
// check against PyTorch (scripts/gpu-fp8.sh); s[i] = 1 converts x alone.
// Each value goes through to_e4m3x2, the quantize kernels' conversion
// (the hardware's from sm_89), in both halves; halves that differ write a
// byte off by one, which fails the check.
struct ConvertArgs {
    u64 x, s, q;
    i64 n;
};

extern "C" __global__ void e4m3_convert(ConvertArgs a) {
    const float* x = (const float*)a.x;
    const float* s = (const float*)a.s;
    unsigned char* q = (unsigned char*)a.q;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (i64)gridDim.x * blockDim.x) {
        float v = __fdiv_rn(x[i], s[i]);
        unsigned short p = to_e4m3x2(v, v);
        unsigned char lo = (unsigned char)p, hi = (unsigned char)(p >> 8);
        q[i] = lo == hi ? lo : lo ^ 1;
    }
}

// FlagArgs: flag_wait spins, one thread, until the 32-bit word at addr
// equals value, then sets it to zero: a pushed transfer's receiver waiting
// for its data flag (or a sender for its ready flag), written by the other
// GPU over NVLink (docs/native.md). It gives up after timeout_ns (longer
// than the host's wait with its abort), leaving the flag, so that a peer
// that died cannot hold this GPU forever: the host's wait times out first
// and names the peer. One thread (any other returns).
struct FlagArgs {
    u64 addr, timeout_ns;
    unsigned value, pad;
};
static_assert(sizeof(FlagArgs) == 24, "FlagArgs is mirrored by package native: change both");

__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void flag_wait(FlagArgs a) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    volatile unsigned* f = (volatile unsigned*)a.addr;
    const u64 t0 = global_ns();
    while (*f != a.value) {
        if (global_ns() - t0 > a.timeout_ns) return;
        __nanosleep(128);
    }
    *f = 0;
    __threadfence_system();
}
