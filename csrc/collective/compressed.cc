#include "collective/compressed.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {
namespace {

using codec::Kind;
using codec::RngKey;

// RNG streams: rank in the high bits, the phase of the algorithm in the low byte.
constexpr uint32_t kGatherPhase = 0xF0;
RngKey key(const CompressedCall& call, const Comm& c, int rank, uint32_t phase) {
  return RngKey{call.seed, c.seq, static_cast<uint32_t>(rank) << 8 | phase};
}

// Accounts time spent in codec kernels to the call (stats: codec vs transport time).
class CodecTimer {
 public:
  explicit CodecTimer(Comm& c) : c_(c), t0_(std::chrono::steady_clock::now()) {}
  ~CodecTimer() {
    c_.codec_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  Comm& c_;
  std::chrono::steady_clock::time_point t0_;
};

struct Layout {  // element parts and their encoded byte ranges
  std::vector<size_t> elem;   // size n+1
  std::vector<size_t> bytes;  // size n+1, prefix sums of encoded sizes
  size_t len(int i) const { return elem[i + 1] - elem[i]; }
  size_t nbytes(int i) const { return bytes[i + 1] - bytes[i]; }
};

Layout layout(const codec::Spec& spec, size_t count, int parts) {
  Layout l{even_parts(count, parts), std::vector<size_t>(parts + 1, 0)};
  for (int i = 0; i < parts; ++i) l.bytes[i + 1] = l.bytes[i] + codec::encoded_bytes(spec, l.len(i));
  return l;
}

void encode(Comm& c, const CompressedCall& call, const float* x, size_t n, size_t off, const RngKey& k,
            uint8_t* out) {
  CodecTimer t(c);
  codec::encode(call.spec, codec::InType::F32, x, n, off, k, out);
}

// residual[0:n] = x - decode(payload): what this rank's own data lost on the wire.
void record_residual(Comm& c, const CompressedCall& call, const float* x, const uint8_t* payload,
                     size_t bytes, size_t n, size_t off, const RngKey& k) {
  if (!call.residual) return;
  CodecTimer t(c);
  float* r = call.residual + off;
  codec::decode(call.spec, payload, bytes, n, off, k, r);
  for (size_t i = 0; i < n; ++i) r[i] = x[i] - r[i];
}

// Everyone contributes its own encoded part `mine` of `l`, then decodes every part into data.
void gather_encoded(Comm& c, const CompressedCall& call, const Layout& l, std::vector<uint8_t>& wire,
                    float* data, uint32_t step_base) {
  Buf bytes{wire.data(), wire.size(), DType::U8};
  ring_allgather(c, bytes, l.bytes, step_base);
  CodecTimer t(c);
  for (int i = 0; i < c.size(); ++i) {
    codec::decode(call.spec, wire.data() + l.bytes[i], l.nbytes(i), l.len(i), l.elem[i],
                  key(call, c, i, kGatherPhase), data + l.elem[i]);
  }
}

// SRA phase 1: part i of my data goes, encoded, to its owner i (mine stays exact); the owner
// adds what it receives in rank order, so its sum is deterministic.
void scatter_reduce(Comm& c, float* data, const Layout& l, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  std::vector<uint8_t> out(l.bytes[n]), in(l.nbytes(r) * n);
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    encode(c, call, data + l.elem[i], l.len(i), l.elem[i], key(call, c, r, 0), out.data() + l.bytes[i]);
    record_residual(c, call, data + l.elem[i], out.data() + l.bytes[i], l.nbytes(i), l.len(i), l.elem[i],
                    key(call, c, r, 0));
  }
  if (call.residual) std::fill(call.residual + l.elem[r], call.residual + l.elem[r + 1], 0.f);
  std::vector<const void*> sp(n);
  std::vector<void*> rp(n);
  std::vector<size_t> sb(n), rb(n, l.nbytes(r));
  for (int i = 0; i < n; ++i) {
    sp[i] = out.data() + l.bytes[i];
    sb[i] = i == r ? 0 : l.nbytes(i);
    rp[i] = in.data() + i * l.nbytes(r);
  }
  rb[r] = 0;
  alltoall(c, sp, sb, rp, rb);
  CodecTimer t(c);
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    codec::decode_accumulate(call.spec, in.data() + j * l.nbytes(r), l.nbytes(r), l.len(r), l.elem[r],
                             key(call, c, j, 0), data + l.elem[r]);
  }
}

void sra(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  const Layout l = layout(call.spec, count, n);
  scatter_reduce(c, data, l, call);
  // Phase 2: the owner encodes its reduced part once; everybody gathers and decodes all parts.
  std::vector<uint8_t> wire(l.bytes[n]);
  encode(c, call, data + l.elem[r], l.len(r), l.elem[r], key(call, c, r, kGatherPhase),
         wire.data() + l.bytes[r]);
  gather_encoded(c, call, l, wire, data, 1);
}

void ring(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const Layout l = layout(call.spec, count, n);
  auto part = [&](int i) { return ((i % n) + n) % n; };
  size_t max_bytes = 0;
  for (int i = 0; i < n; ++i) max_bytes = std::max(max_bytes, l.nbytes(i));
  std::vector<uint8_t> send_buf[2] = {std::vector<uint8_t>(max_bytes), std::vector<uint8_t>(max_bytes)};
  std::vector<uint8_t> recv_buf(max_bytes);

  // Step s: receive the partial sum of part (r-s-2) encoded by the left neighbour at its
  // phase s+1, add mine, re-encode at phase s+2 and pass it on; the last step keeps it.
  int p0 = part(r - 1);
  encode(c, call, data + l.elem[p0], l.len(p0), l.elem[p0], key(call, c, r, 1), send_buf[0].data());
  record_residual(c, call, data + l.elem[p0], send_buf[0].data(), l.nbytes(p0), l.len(p0), l.elem[p0],
                  key(call, c, r, 1));
  auto pending = c.isend(send_buf[0].data(), l.nbytes(p0), right, 0);
  for (int s = 0; s + 1 < n; ++s) {
    const int p = part(r - s - 2);
    auto q = c.irecv(recv_buf.data(), l.nbytes(p), left, s);
    c.wait(*q, left, "compressed reduce-scatter receive from");
    const RngKey dec = key(call, c, left, s + 1);
    if (s + 2 < n) {
      c.wait(*pending, right, "compressed reduce-scatter send to");
      auto& out = send_buf[(s + 1) % 2];
      {
        CodecTimer t(c);
        codec::decode_add_encode(call.spec, recv_buf.data(), l.nbytes(p), data + l.elem[p], l.len(p),
                                 l.elem[p], dec, key(call, c, r, s + 2), out.data());
      }
      // This rank's share of a part it forwards can't be told apart from the others' any more:
      // its residual is that of a local encode (an approximation, docs/algorithms.md).
      if (call.residual) {
        std::vector<uint8_t> own(l.nbytes(p));
        encode(c, call, data + l.elem[p], l.len(p), l.elem[p], key(call, c, r, s + 2), own.data());
        record_residual(c, call, data + l.elem[p], own.data(), own.size(), l.len(p), l.elem[p],
                        key(call, c, r, s + 2));
      }
      pending = c.isend(out.data(), l.nbytes(p), right, s + 1);
    } else {
      CodecTimer t(c);
      codec::decode_accumulate(call.spec, recv_buf.data(), l.nbytes(p), l.len(p), l.elem[p], dec,
                               data + l.elem[p]);
    }
  }
  c.wait(*pending, right, "compressed reduce-scatter send to");
  if (call.residual) std::fill(call.residual + l.elem[r], call.residual + l.elem[r + 1], 0.f);
  std::vector<uint8_t> wire(l.bytes[n]);
  encode(c, call, data + l.elem[r], l.len(r), l.elem[r], key(call, c, r, kGatherPhase), wire.data() + l.bytes[r]);
  gather_encoded(c, call, l, wire, data, static_cast<uint32_t>(n));
}

void topk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  const size_t pb = codec::encoded_bytes(call.spec, count);
  std::vector<uint8_t> wire(pb * n);
  encode(c, call, data, count, 0, key(call, c, r, 0), wire.data() + pb * r);
  record_residual(c, call, data, wire.data() + pb * r, pb, count, 0, key(call, c, r, 0));
  std::vector<size_t> begin(n + 1);
  for (int i = 0; i <= n; ++i) begin[i] = pb * i;
  ring_allgather(c, Buf{wire.data(), wire.size(), DType::U8}, begin, 0);
  CodecTimer t(c);
  std::fill(data, data + count, 0.f);
  for (int j = 0; j < n; ++j) {
    codec::decode_accumulate(call.spec, wire.data() + pb * j, pb, count, 0, key(call, c, j, 0), data);
  }
}

void randomk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  // Every rank selects the same indices (keyed by seed and seq only), so the k values can be
  // summed by an exact all-reduce. Slot 0 carries the "saw a NaN/Inf" flag as NaN.
  const size_t pb = codec::encoded_bytes(call.spec, count);
  const RngKey k = key(call, c, c.rank(), 0);
  std::vector<uint8_t> payload(pb);
  encode(c, call, data, count, 0, k, payload.data());
  record_residual(c, call, data, payload.data(), pb, count, 0, k);
  const size_t kept = (pb - 8) / sizeof(float);
  std::vector<float> vals(kept + 1);
  uint32_t flags;
  std::memcpy(&flags, payload.data() + 4, 4);
  vals[0] = flags ? std::nanf("") : 0.f;
  std::memcpy(vals.data() + 1, payload.data() + 8, kept * sizeof(float));
  allreduce(c, Buf{vals.data(), vals.size(), DType::F32}, RedOp::Sum, AllreduceAlgo::Auto);
  flags = std::isnan(vals[0]) ? 1u : 0u;
  std::memcpy(payload.data() + 4, &flags, 4);
  std::memcpy(payload.data() + 8, vals.data() + 1, kept * sizeof(float));
  CodecTimer t(c);
  codec::decode(call.spec, payload.data(), pb, count, 0, k, data);
}

}  // namespace

void compressed_reduce_scatter(Comm& c, float* data, size_t count, const CompressedCall& call) {
  if (c.size() == 1 || count == 0) return;
  scatter_reduce(c, data, layout(call.spec, count, c.size()), call);
}

CompressedAlgo parse_compressed_algo(const std::string& s) {
  if (s == "auto") return CompressedAlgo::Auto;
  if (s == "ring") return CompressedAlgo::Ring;
  if (s == "sra") return CompressedAlgo::Sra;
  if (s == "sparse") return CompressedAlgo::Sparse;
  throw std::invalid_argument("unknown compressed algorithm '" + s + "' (expected auto, ring, sra or sparse)");
}

const char* compressed_algo_name(CompressedAlgo a) {
  switch (a) {
    case CompressedAlgo::Auto: return "auto";
    case CompressedAlgo::Ring: return "ring";
    case CompressedAlgo::Sra: return "sra";
    case CompressedAlgo::Sparse: return "sparse";
  }
  return "?";
}

CompressedAlgo choose_compressed(const codec::Spec& spec, CompressedAlgo requested) {
  const bool sparse = spec.kind == Kind::TopK || spec.kind == Kind::RandomK;
  if (sparse) return CompressedAlgo::Sparse;  // dense algorithms can't carry index/value pairs
  if (requested == CompressedAlgo::Sparse || requested == CompressedAlgo::Auto) return CompressedAlgo::Sra;
  return requested;
}

void compressed_allreduce(Comm& c, float* data, size_t count, const CompressedCall& call) {
  if (c.size() == 1 || count == 0) {
    // Still one encode/decode round trip, so results do not depend on the world size's path.
    if (count == 0) return;
    std::vector<uint8_t> wire(codec::encoded_bytes(call.spec, count));
    const RngKey k = key(call, c, 0, kGatherPhase);
    encode(c, call, data, count, 0, k, wire.data());
    record_residual(c, call, data, wire.data(), wire.size(), count, 0, k);
    CodecTimer t(c);
    codec::decode(call.spec, wire.data(), wire.size(), count, 0, k, data);
    return;
  }
  switch (choose_compressed(call.spec, call.algo)) {
    case CompressedAlgo::Ring: return ring(c, data, count, call);
    case CompressedAlgo::Sparse:
      return call.spec.kind == Kind::TopK ? topk(c, data, count, call) : randomk(c, data, count, call);
    default: return sra(c, data, count, call);
  }
}

}  // namespace ringzip
