// top-k and random-k codecs on the GPU, byte-identical to sparse_cpu.cc (selection rules in
// sparse_math.h). Both select "the k largest 32-bit keys, ties to the lower index":
//   top-k:    key = |x| as ordered bits (NaN > Inf > finite)
//   random-k: key = ~philox_word(seed, seq, stream 0, g)   (the k smallest words win)
// Selection is a radix select without host synchronization: three histogram passes (11, 11 and
// 10 bits) narrow the k-th key T and how many elements equal to T to take; a stable compaction
// (per-tile counts, one scan over tiles, per-tile block scan) writes the chosen indices in
// ascending order.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include "codec/codec_cuda.h"
#include "codec/cuda_util.cuh"
#include "codec/quantize_math.h"
#include "codec/sparse_math.h"

namespace ringzip::codec::cuda {
namespace {

constexpr int kBins = 2048;
constexpr int kThreads = 256, kItems = 16, kTile = kThreads * kItems;

struct SelState {
  uint32_t prefix, mask, need, pad;
  uint32_t hist[kBins];
};

struct TopkKey {
  const float* x;
  __device__ __forceinline__ uint32_t operator()(int64_t i) const { return f2u(x[i]) & 0x7fffffffu; }
};
struct RandomkKey {
  RngKey key;
  int64_t off;
  __device__ __forceinline__ uint32_t operator()(int64_t i) const { return ~philox_word(key, (uint64_t)(off + i)); }
};

__global__ void init_kernel(SelState* st, uint32_t k) {
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) st->hist[i] = 0;
  if (threadIdx.x == 0) st->prefix = 0, st->mask = 0, st->need = k;
}

template <typename KeyFn>
__global__ void __launch_bounds__(kThreads) hist_kernel(KeyFn f, int64_t n, SelState* st, int shift, int bits) {
  __shared__ uint32_t h[kBins];
  const int nb = 1 << bits;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) h[i] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask, dmask = (uint32_t)nb - 1;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t k = f(i);
    if ((k & mask) == prefix) atomicAdd(&h[(k >> shift) & dmask], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nb; i += blockDim.x)
    if (h[i]) atomicAdd(&st->hist[i], h[i]);
}

// One block of 1024 threads: the digit (from the top) where the running count reaches `need`.
__global__ void __launch_bounds__(1024) pick_kernel(SelState* st, int shift, int bits) {
  using Scan = cub::BlockScan<uint32_t, 1024>;
  __shared__ typename Scan::TempStorage tmp;
  const int nb = 1 << bits, t = threadIdx.x;
  const int d0 = nb - 1 - 2 * t, d1 = nb - 2 - 2 * t;
  const uint32_t c0 = d0 >= 0 ? st->hist[d0] : 0u, c1 = d1 >= 0 ? st->hist[d1] : 0u;
  const uint32_t need = st->need;
  uint32_t excl;
  Scan(tmp).ExclusiveSum(c0 + c1, excl);
  __syncthreads();
  int d = -1;
  uint32_t left = 0;
  if (excl < need && need <= excl + c0)
    d = d0, left = need - excl;
  else if (excl + c0 < need && need <= excl + c0 + c1)
    d = d1, left = need - excl - c0;
  if (d >= 0) {
    st->prefix |= (uint32_t)d << shift;
    st->mask |= (uint32_t)(nb - 1) << shift;
    st->need = left;
  }
  if (d0 >= 0) st->hist[d0] = 0;
  if (d1 >= 0) st->hist[d1] = 0;
}

// Per tile: (#key > T) << 32 | (#key == T).
template <typename KeyFn>
__global__ void __launch_bounds__(kThreads) count_kernel(KeyFn f, int64_t n, const SelState* st, uint64_t* tiles) {
  using Reduce = cub::BlockReduce<uint64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const uint32_t T = st->prefix;
  const int64_t base = (int64_t)blockIdx.x * kTile;
  uint64_t c = 0;
#pragma unroll 4
  for (int j = 0; j < kItems; ++j) {
    int64_t i = base + j * kThreads + threadIdx.x;
    if (i < n) {
      uint32_t k = f(i);
      c += k > T ? (uint64_t(1) << 32) : (k == T ? 1u : 0u);
    }
  }
  uint64_t s = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0) tiles[blockIdx.x] = s;
}

template <typename KeyFn>
__global__ void __launch_bounds__(kThreads)
    write_kernel(KeyFn f, int64_t n, const SelState* st, const uint64_t* tile_excl, int32_t* idx) {
  using Scan = cub::BlockScan<uint64_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const uint32_t T = st->prefix, need = st->need;
  const int64_t base = (int64_t)blockIdx.x * kTile + (int64_t)threadIdx.x * kItems;
  uint32_t keys[kItems];
  uint64_t mine = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    int64_t i = base + j;
    keys[j] = i < n ? f(i) : 0u;
    if (i < n) mine += keys[j] > T ? (uint64_t(1) << 32) : (keys[j] == T ? 1u : 0u);
  }
  uint64_t before;
  Scan(tmp).ExclusiveSum(mine, before);
  before += tile_excl[blockIdx.x];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    int64_t i = base + j;
    if (i >= n) break;
    const uint32_t gt = (uint32_t)(before >> 32), eq = (uint32_t)before;
    if (keys[j] > T) {
      idx[gt + (eq < need ? eq : need)] = (int32_t)i;
      before += uint64_t(1) << 32;
    } else if (keys[j] == T) {
      if (eq < need) idx[gt + eq] = (int32_t)i;
      before += 1;
    }
  }
}

__global__ void iota_kernel(int32_t* idx, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    idx[i] = (int32_t)i;
}

template <typename KeyFn>
void select(const Ctx& c, KeyFn f, int64_t n, int64_t k, int32_t* idx) {
  if (k == n) {
    iota_kernel<<<grid_for(n, 256), 256, 0, c.stream>>>(idx, n);
    RZ_LAUNCH_CHECK("iota_kernel");
    return;
  }
  auto* st = static_cast<SelState*>(c.scratch(sizeof(SelState)));
  init_kernel<<<1, 256, 0, c.stream>>>(st, (uint32_t)k);
  int dev = 0, sms = 0;
  RZ_CUDA_CHECK(cudaGetDevice(&dev));
  RZ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const unsigned hg = grid_for(n, kThreads * 8, sms * 8);
  const int shifts[3] = {21, 10, 0}, widths[3] = {11, 11, 10};
  for (int p = 0; p < 3; ++p) {
    hist_kernel<<<hg, kThreads, 0, c.stream>>>(f, n, st, shifts[p], widths[p]);
    pick_kernel<<<1, 1024, 0, c.stream>>>(st, shifts[p], widths[p]);
  }
  RZ_LAUNCH_CHECK("radix select");
  const int64_t tiles = (n + kTile - 1) / kTile;
  auto* counts = static_cast<uint64_t*>(c.scratch(2 * tiles * sizeof(uint64_t)));
  uint64_t* excl = counts + tiles;
  count_kernel<<<(unsigned)tiles, kThreads, 0, c.stream>>>(f, n, st, counts);
  size_t tmp_bytes = 0;
  RZ_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, tmp_bytes, counts, excl, (int)tiles, c.stream));
  void* tmp = c.scratch(tmp_bytes ? tmp_bytes : 1);
  RZ_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp, tmp_bytes, counts, excl, (int)tiles, c.stream));
  write_kernel<<<(unsigned)tiles, kThreads, 0, c.stream>>>(f, n, st, excl, idx);
  RZ_LAUNCH_CHECK("stable compaction");
}

__global__ void header_kernel(uint8_t* out, uint32_t k, const uint32_t* flags) {
  st_u32(out, k);
  if (flags) st_u32(out + 4, *flags);
}

__global__ void gather_kernel(const float* x, const int32_t* idx, int64_t k, uint8_t* vals) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += (int64_t)gridDim.x * blockDim.x)
    st_u32(vals + 4 * j, f2u(x[idx[j]]));
}

__global__ void nonfinite_kernel(const float* x, int64_t n, uint32_t* flag) {
  bool bad = false;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    bad |= !abs_bits_finite(abs_bits(x[i]));
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, kRandomkNonFinite);
}

// out[idx[j]] (+)= val[j]; idx from the payload (unvalidated: out-of-range entries are skipped),
// or from a device array. Does nothing when `flags` says the sender saw a NaN/Inf.
template <bool Acc>
__global__ void scatter_kernel(const uint8_t* idx_bytes, const int32_t* idx, const uint8_t* vals, int64_t k, int64_t n,
                               float* out, const uint8_t* flags) {
  if (flags && (ld_u32(flags) & kRandomkNonFinite)) return;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += (int64_t)gridDim.x * blockDim.x) {
    int32_t i = idx ? idx[j] : (int32_t)ld_u32(idx_bytes + 4 * j);
    if (i < 0 || i >= n) continue;
    float v = u2f(ld_u32(vals + 4 * j));
    out[i] = Acc ? rz_add(out[i], v) : v;
  }
}

template <bool Acc>
__global__ void nan_fill_kernel(const uint8_t* flags, int64_t n, float* out) {
  if (!(ld_u32(flags) & kRandomkNonFinite)) return;
  const float nan = u2f(0x7fc00000u);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = Acc ? rz_add(out[i], nan) : nan;
}

// Error feedback of top-k (codec.h): r[i] = x[i] - val[j] at the payload's indices (r holds a
// copy of x elsewhere); x == r: r[i] -= r[i] (what was sent is no longer owed; NaN stays NaN).
__global__ void topk_residual_kernel(const uint8_t* idx_bytes, const uint8_t* vals, int64_t k, int64_t n,
                                     const float* x, float* r) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < k; j += (int64_t)gridDim.x * blockDim.x) {
    const int32_t i = (int32_t)ld_u32(idx_bytes + 4 * j);
    if (i < 0 || i >= n) continue;
    r[i] = rz_sub(x[i], vals ? u2f(ld_u32(vals + 4 * j)) : x[i]);
  }
}

// r = x + r, x = 0 (top-k feedback's first pass: the value to send, and a cleared accumulator).
__global__ void add_clear_kernel(float* x, float* r, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    r[i] = rz_add(x[i], r[i]);
    x[i] = 0.0f;
  }
}

__global__ void to_values_kernel(const uint8_t* payload, int64_t k, float* vals) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j <= k; j += (int64_t)gridDim.x * blockDim.x)
    vals[j] = j == 0 ? (ld_u32(payload + kRandomkFlagsAt) ? u2f(0x7fc00000u) : 0.f)
                     : u2f(ld_u32(payload + kRandomkValuesAt + 4 * (j - 1)));
}

__global__ void from_values_kernel(const float* vals, int64_t k, uint8_t* payload) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j <= k; j += (int64_t)gridDim.x * blockDim.x) {
    if (j == 0)
      st_u32(payload + kRandomkFlagsAt, vals[0] != vals[0] ? kRandomkNonFinite : 0u);
    else
      st_u32(payload + kRandomkValuesAt + 4 * (j - 1), f2u(vals[j]));
  }
}

int32_t* index_buffer(const Ctx& c, uint8_t* where, int64_t k) {
  return aligned(where, 4) ? reinterpret_cast<int32_t*>(where) : static_cast<int32_t*>(c.scratch(4 * k));
}

}  // namespace

void topk_indices(const Ctx& c, const float* x, int64_t n, int64_t k, int32_t* idx) {
  if (k > 0) select(c, TopkKey{x}, n, k, idx);
}

void randomk_to_values(cudaStream_t s, const uint8_t* payload, size_t k, float* vals) {
  to_values_kernel<<<grid_for(k + 1, 256), 256, 0, s>>>(payload, (int64_t)k, vals);
  RZ_LAUNCH_CHECK("randomk_to_values");
}

void randomk_from_values(cudaStream_t s, const float* vals, size_t k, uint8_t* payload) {
  from_values_kernel<<<grid_for(k + 1, 256), 256, 0, s>>>(vals, (int64_t)k, payload);
  RZ_LAUNCH_CHECK("randomk_from_values");
}

namespace detail {

void topk_encode(const Ctx& c, const Spec& sp, const float* x, int64_t n, uint8_t* out) {
  const int64_t k = k_for(sp, n);
  header_kernel<<<1, 1, 0, c.stream>>>(out, (uint32_t)k, nullptr);
  RZ_LAUNCH_CHECK("topk header");
  if (k == 0) return;
  int32_t* idx = index_buffer(c, out + 4, k);
  select(c, TopkKey{x}, n, k, idx);
  if ((uint8_t*)idx != out + 4) RZ_CUDA_CHECK(cudaMemcpyAsync(out + 4, idx, 4 * k, cudaMemcpyDeviceToDevice, c.stream));
  gather_kernel<<<grid_for(k, 256), 256, 0, c.stream>>>(x, idx, k, out + 4 + 4 * k);
  RZ_LAUNCH_CHECK("topk gather");
}

void topk_decode(const Ctx& c, const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  const int64_t k = k_for(sp, n);
  if (!acc) RZ_CUDA_CHECK(cudaMemsetAsync(out, 0, 4 * n, c.stream));
  if (k == 0) return;
  if (acc)
    scatter_kernel<true><<<grid_for(k, 256), 256, 0, c.stream>>>(in + 4, nullptr, in + 4 + 4 * k, k, n, out, nullptr);
  else
    scatter_kernel<false><<<grid_for(k, 256), 256, 0, c.stream>>>(in + 4, nullptr, in + 4 + 4 * k, k, n, out, nullptr);
  RZ_LAUNCH_CHECK("topk scatter");
}

void topk_residual(const Ctx& c, const Spec& sp, const uint8_t* in, const float* x, int64_t n, float* r) {
  const int64_t k = k_for(sp, n);
  // Where nothing was sent x - 0 is x itself (as sparse_cpu.cc: a copy, then the k sent elements).
  if (n && r != x) RZ_CUDA_CHECK(cudaMemcpyAsync(r, x, 4 * n, cudaMemcpyDeviceToDevice, c.stream));
  if (k == 0) return;
  topk_residual_kernel<<<grid_for(k, 256), 256, 0, c.stream>>>(in + 4, in + 4 + 4 * k, k, n, x, r);
  RZ_LAUNCH_CHECK("topk residual");
}

void topk_feedback(const Ctx& c, const Spec& sp, float* x, float* r, int64_t n, uint8_t* out) {
  if (n) {
    add_clear_kernel<<<grid_for(n, 256 * 8, 4096), 256, 0, c.stream>>>(x, r, n);
    RZ_LAUNCH_CHECK("topk feedback add");
  }
  topk_encode(c, sp, r, n, out);  // writes the header even for n == 0
  const int64_t k = k_for(sp, n);
  if (k == 0) return;
  topk_residual_kernel<<<grid_for(k, 256), 256, 0, c.stream>>>(out + 4, nullptr, k, n, r, r);
  RZ_LAUNCH_CHECK("topk feedback clear");
}

void randomk_encode(const Ctx& c, const Spec& sp, const float* x, int64_t n, int64_t off, const RngKey& key,
                    uint8_t* out) {
  const int64_t k = k_for(sp, n);
  auto* flag = static_cast<uint32_t*>(c.scratch(4));
  RZ_CUDA_CHECK(cudaMemsetAsync(flag, 0, 4, c.stream));
  if (n > 0) nonfinite_kernel<<<grid_for(n, 256 * 8, 4096), 256, 0, c.stream>>>(x, n, flag);
  header_kernel<<<1, 1, 0, c.stream>>>(out, (uint32_t)k, flag);
  RZ_LAUNCH_CHECK("randomk header");
  if (k == 0) return;
  auto* idx = static_cast<int32_t*>(c.scratch(4 * k));
  select(c, RandomkKey{RngKey{key.seed, key.seq, 0}, off}, n, k, idx);
  gather_kernel<<<grid_for(k, 256), 256, 0, c.stream>>>(x, idx, k, out + kRandomkValuesAt);
  RZ_LAUNCH_CHECK("randomk gather");
}

void randomk_decode(const Ctx& c, const Spec& sp, const uint8_t* in, int64_t n, int64_t off, const RngKey& key,
                    float* out, bool acc) {
  const int64_t k = k_for(sp, n);
  if (!acc) RZ_CUDA_CHECK(cudaMemsetAsync(out, 0, 4 * n, c.stream));
  if (k == 0) return;
  auto* idx = static_cast<int32_t*>(c.scratch(4 * k));
  select(c, RandomkKey{RngKey{key.seed, key.seq, 0}, off}, n, k, idx);
  const unsigned g = grid_for(k, 256), gn = grid_for(n, 256 * 8, 4096);
  if (acc) {
    scatter_kernel<true><<<g, 256, 0, c.stream>>>(nullptr, idx, in + kRandomkValuesAt, k, n, out, in + kRandomkFlagsAt);
    nan_fill_kernel<true><<<gn, 256, 0, c.stream>>>(in + kRandomkFlagsAt, n, out);
  } else {
    scatter_kernel<false>
        <<<g, 256, 0, c.stream>>>(nullptr, idx, in + kRandomkValuesAt, k, n, out, in + kRandomkFlagsAt);
    nan_fill_kernel<false><<<gn, 256, 0, c.stream>>>(in + kRandomkFlagsAt, n, out);
  }
  RZ_LAUNCH_CHECK("randomk scatter");
}

}  // namespace detail
}  // namespace ringzip::codec::cuda
