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

// Accounts time spent in codec kernels to the call (stats: codec vs transport time). On a
// device this is the time to queue them.
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
  c.dev.encode(call.spec, codec::InType::F32, x, n, off, k, out);
}

// residual[off:off+n] = x - decode(payload): what this rank's own data lost on the wire.
void record_residual(Comm& c, const CompressedCall& call, const float* x, const uint8_t* payload,
                     size_t bytes, size_t n, size_t off, const RngKey& k) {
  if (!call.residual) return;
  CodecTimer t(c);
  c.dev.decode(call.spec, payload, bytes, n, off, k, call.residual + off);
  c.dev.residual(call.residual + off, x, n);
}

void clear_residual(Comm& c, const CompressedCall& call, size_t off, size_t n) {
  if (call.residual) c.dev.zero(call.residual + off, n * sizeof(float));
}

// Every rank contributed its own encoded part of `l` in `wire`; gather all parts and decode.
void gather_encoded(Comm& c, const CompressedCall& call, const Layout& l, uint8_t* wire, float* data,
                    uint32_t step_base) {
  ring_allgather(c, Buf{wire, l.bytes.back(), DType::U8}, l.bytes, step_base);
  CodecTimer t(c);
  for (int i = 0; i < c.size(); ++i) {
    c.dev.decode(call.spec, wire + l.bytes[i], l.nbytes(i), l.len(i), l.elem[i], key(call, c, i, kGatherPhase),
                 data + l.elem[i]);
  }
}

// SRA phase 1: part i of my data goes, encoded, to its owner i (mine stays exact); the owner
// adds what it receives in rank order, so its sum is deterministic. On host transports each
// part is sent as soon as it is encoded and each received part decoded as soon as it lands,
// so the codec overlaps the transfer; stream-ordered transports post one all-to-all group.
void scatter_reduce(Comm& c, float* data, const Layout& l, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  auto out = c.dev.alloc(l.bytes[n]);
  auto in = c.dev.alloc(l.nbytes(r) * n);
  auto encode_part = [&](int i) {
    encode(c, call, data + l.elem[i], l.len(i), l.elem[i], key(call, c, r, 0), out.get() + l.bytes[i]);
    record_residual(c, call, data + l.elem[i], out.get() + l.bytes[i], l.nbytes(i), l.len(i), l.elem[i],
                    key(call, c, r, 0));
  };
  auto accumulate = [&](int j) {
    CodecTimer t(c);
    c.dev.decode_accumulate(call.spec, in.get() + j * l.nbytes(r), l.nbytes(r), l.len(r), l.elem[r],
                            key(call, c, j, 0), data + l.elem[r]);
  };
  clear_residual(c, call, l.elem[r], l.len(r));
  if (c.net.eager_receives()) {
    std::vector<std::unique_ptr<Request>> recvs(n), sends;
    std::vector<int> send_peers;
    for (int j = 0; j < n; ++j)
      if (j != r) recvs[j] = c.irecv(in.get() + j * l.nbytes(r), l.nbytes(r), j, 0);
    for (int k = 1; k < n; ++k) {  // staggered so that every owner is served from the start
      const int i = (r + k) % n;
      encode_part(i);
      sends.push_back(c.isend(out.get() + l.bytes[i], l.nbytes(i), i, 0));
      send_peers.push_back(i);
    }
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      c.wait(*recvs[j], j, "compressed scatter-reduce receive from");
      accumulate(j);
    }
    c.wait_all(sends, send_peers, "compressed scatter-reduce send to");
    return;
  }
  for (int i = 0; i < n; ++i)
    if (i != r) encode_part(i);
  std::vector<const void*> sp(n);
  std::vector<void*> rp(n);
  std::vector<size_t> sb(n), rb(n, l.nbytes(r));
  for (int i = 0; i < n; ++i) {
    sp[i] = out.get() + l.bytes[i];
    sb[i] = i == r ? 0 : l.nbytes(i);
    rp[i] = in.get() + i * l.nbytes(r);
  }
  rb[r] = 0;
  alltoall(c, sp, sb, rp, rb);
  for (int j = 0; j < n; ++j)
    if (j != r) accumulate(j);
}

// Phase 2 of sra and ring: the owner encodes its reduced part once; all gather and decode.
// The owner's residual for its part is what that encode lost (sum - decode(encode(sum))), so
// error feedback also covers the second compression of biased codecs.
void owner_gather(Comm& c, float* data, const Layout& l, const CompressedCall& call, uint32_t step_base) {
  const int r = c.rank();
  auto wire = c.dev.alloc(l.bytes.back());
  const RngKey k = key(call, c, r, kGatherPhase);
  encode(c, call, data + l.elem[r], l.len(r), l.elem[r], k, wire.get() + l.bytes[r]);
  record_residual(c, call, data + l.elem[r], wire.get() + l.bytes[r], l.nbytes(r), l.len(r), l.elem[r], k);
  gather_encoded(c, call, l, wire.get(), data, step_base);
}

void sra(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const Layout l = layout(call.spec, count, c.size());
  scatter_reduce(c, data, l, call);
  owner_gather(c, data, l, call, 1);
}

void ring(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const Layout l = layout(call.spec, count, n);
  auto part = [&](int i) { return ((i % n) + n) % n; };
  size_t max_bytes = 0;
  for (int i = 0; i < n; ++i) max_bytes = std::max(max_bytes, l.nbytes(i));
  auto out = c.dev.alloc(max_bytes), in = c.dev.alloc(max_bytes);

  // Step s sends the partial sum of part (r-s-1) (encoded at phase s+1) and receives that of
  // part (r-s-2) from the left, adds its own and re-encodes it for the next step; the last
  // step keeps the sum of its own part r.
  const int p0 = part(r - 1);
  encode(c, call, data + l.elem[p0], l.len(p0), l.elem[p0], key(call, c, r, 1), out.get());
  record_residual(c, call, data + l.elem[p0], out.get(), l.nbytes(p0), l.len(p0), l.elem[p0], key(call, c, r, 1));
  for (int s = 0; s + 1 < n; ++s) {
    const int sp = part(r - s - 1), p = part(r - s - 2);
    c.net.group_start();
    auto snd = c.isend(out.get(), l.nbytes(sp), right, s);
    auto rcv = c.irecv(in.get(), l.nbytes(p), left, s);
    c.net.group_end();
    c.wait(*rcv, left, "compressed reduce-scatter receive from");
    c.wait(*snd, right, "compressed reduce-scatter send to");
    const RngKey dec = key(call, c, left, s + 1);
    CodecTimer t(c);
    if (s + 2 < n) {
      c.dev.decode_add_encode(call.spec, in.get(), l.nbytes(p), data + l.elem[p], l.len(p), l.elem[p], dec,
                              key(call, c, r, s + 2), out.get());
      // This rank's share of a forwarded sum can't be told apart from the others' any more:
      // its residual is that of a local encode (an approximation, docs/algorithms.md).
      if (call.residual) {
        auto own = c.dev.alloc(l.nbytes(p));
        c.dev.encode(call.spec, codec::InType::F32, data + l.elem[p], l.len(p), l.elem[p], key(call, c, r, s + 2),
                     own.get());
        c.dev.decode(call.spec, own.get(), l.nbytes(p), l.len(p), l.elem[p], key(call, c, r, s + 2),
                     call.residual + l.elem[p]);
        c.dev.residual(call.residual + l.elem[p], data + l.elem[p], l.len(p));
      }
    } else {
      c.dev.decode_accumulate(call.spec, in.get(), l.nbytes(p), l.len(p), l.elem[p], dec, data + l.elem[p]);
    }
  }
  owner_gather(c, data, l, call, static_cast<uint32_t>(n));
}

void topk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  const size_t pb = codec::encoded_bytes(call.spec, count);
  auto wire = c.dev.alloc(pb * n);
  encode(c, call, data, count, 0, key(call, c, r, 0), wire.get() + pb * r);
  record_residual(c, call, data, wire.get() + pb * r, pb, count, 0, key(call, c, r, 0));
  std::vector<size_t> begin(n + 1);
  for (int i = 0; i <= n; ++i) begin[i] = pb * i;
  ring_allgather(c, Buf{wire.get(), pb * n, DType::U8}, begin, 0);
  CodecTimer t(c);
  c.dev.zero(data, count * sizeof(float));
  for (int j = 0; j < n; ++j) {  // rank order, the same on every rank
    c.dev.decode_accumulate(call.spec, wire.get() + pb * j, pb, count, 0, key(call, c, j, 0), data);
  }
}

void randomk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  // Every rank selects the same indices (keyed by seed and seq only), so the k values can be
  // summed by an exact all-reduce; slot 0 carries the "saw a NaN/Inf" flag as NaN.
  const size_t pb = codec::encoded_bytes(call.spec, count);
  const size_t k = static_cast<size_t>(codec::k_for(call.spec, count));
  const RngKey key0 = key(call, c, c.rank(), 0);
  auto payload = c.dev.alloc(pb);
  auto vals = c.dev.alloc((k + 1) * sizeof(float));
  float* v = reinterpret_cast<float*>(vals.get());
  encode(c, call, data, count, 0, key0, payload.get());
  record_residual(c, call, data, payload.get(), pb, count, 0, key0);
  c.dev.randomk_to_values(payload.get(), k, v);
  allreduce(c, Buf{v, k + 1, DType::F32}, RedOp::Sum, AllreduceAlgo::Auto);
  c.dev.randomk_from_values(v, k, payload.get());
  CodecTimer t(c);
  c.dev.decode(call.spec, payload.get(), pb, count, 0, key0, data);
}

}  // namespace

void compressed_reduce_scatter(Comm& c, float* data, size_t count, const CompressedCall& call) {
  if (c.size() == 1 || count == 0) return;
  scatter_reduce(c, data, layout(call.spec, count, c.size()), call);
  if (call.residual) c.dev.drop_nonfinite(call.residual, count);
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
    const size_t bytes = codec::encoded_bytes(call.spec, count);
    auto wire = c.dev.alloc(bytes);
    const RngKey k = key(call, c, 0, kGatherPhase);
    encode(c, call, data, count, 0, k, wire.get());
    record_residual(c, call, data, wire.get(), bytes, count, 0, k);
    CodecTimer t(c);
    c.dev.decode(call.spec, wire.get(), bytes, count, 0, k, data);
    if (call.residual) c.dev.drop_nonfinite(call.residual, count);
    return;
  }
  switch (choose_compressed(call.spec, call.algo)) {
    case CompressedAlgo::Ring: ring(c, data, count, call); break;
    case CompressedAlgo::Sparse:
      call.spec.kind == Kind::TopK ? topk(c, data, count, call) : randomk(c, data, count, call);
      break;
    default: sra(c, data, count, call);
  }
  if (call.residual) c.dev.drop_nonfinite(call.residual, count);
}

}  // namespace ringzip
