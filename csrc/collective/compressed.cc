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

// RNG streams: the call's number (CompressedCall::rng_seq), rank in the high bits of the stream
// word, the phase of the algorithm in its low byte.
constexpr uint32_t kGatherPhase = 0xF0;
RngKey key(const CompressedCall& call, const Comm&, int rank, uint32_t phase) {
  return RngKey{call.seed, call.rng_seq, static_cast<uint32_t>(rank) << 8 | phase};
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
// Returns true when that residual is known to hold no NaN/Inf.
bool record_residual(Comm& c, const CompressedCall& call, const float* x, const uint8_t* payload,
                     size_t bytes, size_t n, size_t off, const RngKey& k) {
  if (!call.residual) return true;
  CodecTimer t(c);
  return c.dev.decode_residual(call.spec, payload, bytes, n, off, k, x, call.residual + off);
}

// Error feedback: what earlier calls owe is sent along with this call's data.
void add_residual(Comm& c, const CompressedCall& call, float* data, size_t count, size_t off = 0) {
  if (call.residual) c.dev.reduce_into(DType::F32, RedOp::Sum, data + off, call.residual + off, count);
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

// SRA phase 1 on stream-ordered transports (host transports: sra_host): part i of my data
// goes, encoded, to its owner i (mine stays exact) in one all-to-all group; the owner adds what
// it receives in rank order, so its sum is deterministic.
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

// SRA on host transports, pipelined. Every part is cut into segments at multiples of the
// bucket from the part's start, so each segment encodes exactly the buckets (and RNG counters)
// the whole part would: the result is bit for bit that of the unsegmented algorithm, while
// the codec of one segment overlaps the transfer of the others. Iteration t encodes and sends
// segment t of every peer's part, reduces segment t-1 of this rank's part (contributions added
// in rank order) and, with `gather`, sends its encoding to every peer, and decodes the gathered
// segments t-2 of the others. Without `gather` it is SRA's first phase alone (reduce-scatter). Each wait is for data its peers post one iteration earlier, and
// all receives are posted up front, so no cycle of waits can form.
// 2 MiB of float32 input per message: on 4 ranks sharing 2 cores each message costs ~0.3 ms of
// wake-ups, so 256 KiB segments lost 40% on loopback; 256 KiB-8 MiB tie at 1 Gbit/s.
constexpr size_t kSegmentElems = size_t{1} << 19;
constexpr uint32_t kGatherStep = 0x8000;           // step bit of phase-2 messages

struct Segments {  // part i's segment t: elements [elem[i][t], elem[i][t+1]) (absolute)
  std::vector<std::vector<size_t>> elem, bytes;  // bytes: offsets within the part's buffer
  size_t count(int i) const { return elem[i].size() - 1; }
  size_t len(int i, size_t t) const { return elem[i][t + 1] - elem[i][t]; }
  size_t nbytes(int i, size_t t) const { return bytes[i][t + 1] - bytes[i][t]; }
  size_t total_bytes(int i) const { return bytes[i].back(); }
};

Segments segments(const codec::Spec& spec, const Layout& l, int n) {
  const size_t bucket = static_cast<size_t>(std::max<int64_t>(1, spec.bucket));
  size_t seg = std::max(bucket, kSegmentElems / bucket * bucket);
  size_t longest = 0;
  for (int i = 0; i < n; ++i) longest = std::max(longest, l.len(i));
  while ((longest + seg - 1) / seg >= kGatherStep) seg *= 2;  // segment index must fit the tag's step
  Segments g{std::vector<std::vector<size_t>>(n), std::vector<std::vector<size_t>>(n)};
  for (int i = 0; i < n; ++i) {
    g.elem[i] = {l.elem[i]};
    g.bytes[i] = {0};
    for (size_t e = l.elem[i]; e < l.elem[i + 1];) {
      const size_t len = std::min(seg, l.elem[i + 1] - e);
      e += len;
      g.elem[i].push_back(e);
      g.bytes[i].push_back(g.bytes[i].back() + codec::encoded_bytes(spec, static_cast<int64_t>(len)));
    }
  }
  return g;
}

// Returns true when the residual is known to hold no NaN/Inf (no scan needed).
bool sra_host(Comm& c, float* data, const Layout& l, const CompressedCall& call, bool gather) {
  const int n = c.size(), r = c.rank();
  const Segments g = segments(call.spec, l, n);
  // mine: my encodings of every part; reduce_in: peers' encodings of my part (one slot per
  // peer); gather_in: the owners' encodings of their parts; my own part's is mine[r].
  std::vector<std::shared_ptr<uint8_t>> mine(n), reduce_in(n), gather_in(n);
  for (int i = 0; i < n; ++i) {
    if (i != r || gather) mine[i] = c.dev.alloc(g.total_bytes(i));
    if (i == r) continue;
    reduce_in[i] = c.dev.alloc(g.total_bytes(r));
    if (gather) gather_in[i] = c.dev.alloc(g.total_bytes(i));
  }
  std::vector<std::vector<std::unique_ptr<Request>>> reduce_recv(n), gather_recv(n);
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    for (size_t t = 0; t < g.count(r); ++t)
      reduce_recv[j].push_back(c.irecv(reduce_in[j].get() + g.bytes[r][t], g.nbytes(r, t), j, t));
    for (size_t t = 0; gather && t < g.count(j); ++t)
      gather_recv[j].push_back(c.irecv(gather_in[j].get() + g.bytes[j][t], g.nbytes(j, t), j, kGatherStep | t));
  }
  std::vector<std::unique_ptr<Request>> sends;
  std::vector<int> send_peers;
  auto send = [&](int peer, const uint8_t* p, size_t bytes, uint32_t step) {
    sends.push_back(c.isend(p, bytes, peer, step));
    send_peers.push_back(peer);
  };
  bool finite = true;  // every residual written so far known free of NaN/Inf
  auto encode_segment = [&](int i, size_t t, const RngKey& k) {
    const size_t e = g.elem[i][t];
    uint8_t* out = mine[i].get() + g.bytes[i][t];
    if (i != r && call.residual) {  // a peer's part: what earlier calls owe goes along
      CodecTimer timer(c);
      bool seg_finite = false;
      if (c.dev.encode_feedback(call.spec, data + e, call.residual + e, static_cast<int64_t>(g.len(i, t)), e, k, out,
                                seg_finite)) {
        finite = finite && seg_finite;
        return;
      }
      add_residual(c, call, data, g.len(i, t), e);
    }
    encode(c, call, data + e, g.len(i, t), e, k, out);
    const bool seg_finite = record_residual(c, call, data + e, out, g.nbytes(i, t), g.len(i, t), e, k);
    finite = finite && seg_finite;
  };
  // This rank's part stays exact: it takes what earlier calls owe in full.
  add_residual(c, call, data, l.len(r), l.elem[r]);
  clear_residual(c, call, l.elem[r], l.len(r));

  size_t iterations = 0;
  for (int i = 0; i < n; ++i) iterations = std::max(iterations, g.count(i));
  for (size_t it = 0; it < iterations + 2; ++it) {
    for (int k = 1; k < n; ++k) {  // staggered so that every owner is served from the start
      const int i = (r + k) % n;
      if (it >= g.count(i)) continue;
      encode_segment(i, it, key(call, c, r, 0));
      send(i, mine[i].get() + g.bytes[i][it], g.nbytes(i, it), static_cast<uint32_t>(it));
    }
    if (it >= 1 && it - 1 < g.count(r)) {
      const size_t t = it - 1, e = g.elem[r][t];
      for (int j = 0; j < n; ++j) {
        if (j == r) continue;
        c.wait(*reduce_recv[j][t], j, "compressed scatter-reduce receive from");
        CodecTimer timer(c);
        c.dev.decode_accumulate(call.spec, reduce_in[j].get() + g.bytes[r][t], g.nbytes(r, t), g.len(r, t), e,
                                key(call, c, j, 0), data + e);
      }
      if (!gather) continue;
      encode_segment(r, t, key(call, c, r, kGatherPhase));
      for (int k = 1; k < n; ++k)
        send((r + k) % n, mine[r].get() + g.bytes[r][t], g.nbytes(r, t), kGatherStep | static_cast<uint32_t>(t));
      // The owner keeps decode(encode(sum)) like everyone else, so all ranks agree bitwise.
      CodecTimer timer(c);
      c.dev.decode(call.spec, mine[r].get() + g.bytes[r][t], g.nbytes(r, t), g.len(r, t), e,
                   key(call, c, r, kGatherPhase), data + e);
    }
    if (gather && it >= 2) {
      const size_t t = it - 2;
      for (int j = 0; j < n; ++j) {
        if (j == r || t >= g.count(j)) continue;
        c.wait(*gather_recv[j][t], j, "compressed allgather receive from");
        const size_t e = g.elem[j][t];
        CodecTimer timer(c);
        c.dev.decode(call.spec, gather_in[j].get() + g.bytes[j][t], g.nbytes(j, t), g.len(j, t), e,
                     key(call, c, j, kGatherPhase), data + e);
      }
    }
  }
  c.wait_all(sends, send_peers, "compressed all-reduce send to");
  return finite;
}

// Returns true when the residual is known to hold no NaN/Inf.
bool sra(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const Layout l = layout(call.spec, count, c.size());
  if (c.net.eager_receives()) return sra_host(c, data, l, call, true);  // adds the residual itself
  add_residual(c, call, data, count);
  scatter_reduce(c, data, l, call);
  owner_gather(c, data, l, call, 1);
  return false;
}

bool ring(Comm& c, float* data, size_t count, const CompressedCall& call) {
  add_residual(c, call, data, count);
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
  return false;
}

constexpr size_t kMaxTopkBlocks = 4096;

// Top-k selects within blocks of call.topk_block elements, so block q's payload leaves for every
// peer while block q+1 is being selected; the sum is added in block, then rank order (the same
// order, so the same bits, everywhere). Returns whether the residual is known to be finite.
bool topk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  // At most kMaxTopkBlocks blocks: block q's messages are told apart by tag step q.
  size_t block = call.topk_block ? std::min(call.topk_block, count) : count;
  block = std::max(block, (count + kMaxTopkBlocks - 1) / kMaxTopkBlocks);
  const int blocks = static_cast<int>((count + block - 1) / block);
  Layout l{std::vector<size_t>(blocks + 1), std::vector<size_t>(blocks + 1, 0)};
  for (int q = 0; q <= blocks; ++q) l.elem[q] = std::min(count, q * block);
  for (int q = 0; q < blocks; ++q) l.bytes[q + 1] = l.bytes[q] + codec::encoded_bytes(call.spec, l.len(q));
  const size_t pb = l.bytes.back();
  auto wire = c.dev.alloc(pb * n);
  auto payload = [&](int j, int q) { return wire.get() + pb * j + l.bytes[q]; };
  auto len = [&](int q) { return static_cast<int64_t>(l.len(q)); };
  bool fused = call.residual != nullptr;  // residual added, data zeroed, residual left in one pass
  bool finite = fused;                    // ... and every block's residual finite
  const bool eager = c.net.eager_receives();
  std::vector<std::unique_ptr<Request>> recvs(static_cast<size_t>(n) * blocks), sends;
  std::vector<int> peers;
  if (eager) {
    for (int q = 0; q < blocks; ++q)
      for (int j = 0; j < n; ++j)
        if (j != r) recvs[q * n + j] = c.irecv(payload(j, q), l.nbytes(q), j, q);
  }
  for (int q = 0; q < blocks; ++q) {
    float* x = data + l.elem[q];
    if (fused) {
      CodecTimer t(c);
      bool block_finite = false;
      fused = c.dev.topk_feedback(call.spec, x, call.residual + l.elem[q], len(q), payload(r, q), block_finite);
      finite = finite && fused && block_finite;
      // The device decides: false at q = 0 (nothing touched) means never fused here.
    }
    if (!fused) {
      if (q == 0) add_residual(c, call, data, count);
      encode(c, call, x, l.len(q), l.elem[q], key(call, c, r, 0), payload(r, q));
      record_residual(c, call, x, payload(r, q), l.nbytes(q), l.len(q), l.elem[q], key(call, c, r, 0));
    }
    for (int k = 1; eager && k < n; ++k) {
      peers.push_back((r + k) % n);
      sends.push_back(c.isend(payload(r, q), l.nbytes(q), peers.back(), q));
    }
  }
  if (!fused) {  // the sparse sum accumulates into data
    CodecTimer t(c);
    c.dev.zero(data, count * sizeof(float));
  }
  if (!eager) {
    std::vector<size_t> begin(n + 1);
    for (int i = 0; i <= n; ++i) begin[i] = pb * i;
    ring_allgather(c, Buf{wire.get(), pb * n, DType::U8}, begin, 0);
  }
  for (int q = 0; q < blocks; ++q) {
    for (int j = 0; j < n; ++j) {
      if (eager && j != r) c.wait(*recvs[q * n + j], j, "compressed allgather receive from");
      CodecTimer t(c);
      c.dev.decode_accumulate(call.spec, payload(j, q), l.nbytes(q), len(q), l.elem[q], key(call, c, j, 0),
                              data + l.elem[q]);
    }
  }
  c.wait_all(sends, peers, "compressed allgather send to");
  return finite;
}

bool randomk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  // Every rank selects the same indices (keyed by seed and seq only), so the k values can be
  // summed by an exact all-reduce; slot 0 carries the "saw a NaN/Inf" flag as NaN.
  add_residual(c, call, data, count);
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
  return false;
}

}  // namespace

void compressed_reduce_scatter(Comm& c, float* data, size_t count, const CompressedCall& call) {
  if (c.size() == 1 || count == 0) {  // nothing compressed
    add_residual(c, call, data, count);
    return clear_residual(c, call, 0, count);
  }
  const Layout l = layout(call.spec, count, c.size());
  bool residual_finite = false;  // known without a scan
  if (c.net.eager_receives()) {
    residual_finite = sra_host(c, data, l, call, false);  // adds the residual itself
  } else {
    add_residual(c, call, data, count);
    scatter_reduce(c, data, l, call);
  }
  if (call.residual && !residual_finite) c.dev.drop_nonfinite(call.residual, count);
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
    add_residual(c, call, data, count);
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
  // Each algorithm adds the residual owed by earlier calls itself (top-k and sra on host
  // transports fuse it into their encodes) and says whether the new one is known to be finite.
  bool residual_finite;
  switch (choose_compressed(call.spec, call.algo)) {
    case CompressedAlgo::Ring: residual_finite = ring(c, data, count, call); break;
    case CompressedAlgo::Sparse:
      residual_finite = call.spec.kind == Kind::TopK ? topk(c, data, count, call) : randomk(c, data, count, call);
      break;
    default: residual_finite = sra(c, data, count, call);
  }
  if (call.residual && !residual_finite) c.dev.drop_nonfinite(call.residual, count);
}

}  // namespace ringzip
