#pragma once
// What the compressed algorithms (one file each in this folder: sra, ring, topk, randomk; the
// entry points in allreduce.cc) share: the RNG key of every encode, codec timing, and the
// compute steps around the codec calls that their schedules run between transfers.
#include <chrono>

#include "codec/codec.h"
#include "collective/comm.h"
#include "collective/compressed.h"

namespace ringzip::compressed {

// RNG streams: the call's number (CompressedCall::rng_seq), rank in the high bits of the stream
// word, the phase of the algorithm in its low byte.
constexpr uint32_t kGatherPhase = 0xF0;
inline codec::RngKey key(const CompressedCall& call, const Comm&, int rank, uint32_t phase) {
  return codec::RngKey{call.seed, call.rng_seq, static_cast<uint32_t>(rank) << 8 | phase};
}

// Accounts time spent in codec kernels to the call (stats: codec vs transport time). On a
// device this is the time to queue them.
class CodecTimer {
 public:
  explicit CodecTimer(Comm& c) : c_(c), t0_(std::chrono::steady_clock::now()) {}
  ~CodecTimer() { c_.codec_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  Comm& c_;
  std::chrono::steady_clock::time_point t0_;
};

void encode(Comm& c, const CompressedCall& call, const float* x, size_t n, size_t off, const codec::RngKey& k,
            uint8_t* out);
// residual[off:off+n] = x - decode(payload): what this rank's own data lost on the wire.
// Returns true when that residual is known to hold no NaN/Inf.
bool record_residual(Comm& c, const CompressedCall& call, const float* x, const uint8_t* payload, size_t bytes,
                     size_t n, size_t off, const codec::RngKey& k);
// Error feedback: what earlier calls owe is sent along with this call's data.
void add_residual(Comm& c, const CompressedCall& call, float* data, size_t count, size_t off = 0);
void clear_residual(Comm& c, const CompressedCall& call, size_t off, size_t n);

// The algorithms. Each adds the residual owed by earlier calls itself and returns whether the
// new residual is known to hold no NaN/Inf (false: unknown, the caller scans it).
// SRA; without `gather` its first phase alone (reduce-scatter of the even parts).
bool sra(Comm& c, float* data, size_t count, const CompressedCall& call, bool gather);
bool ring(Comm& c, float* data, size_t count, const CompressedCall& call);
bool topk(Comm& c, float* data, size_t count, const CompressedCall& call);
bool randomk(Comm& c, float* data, size_t count, const CompressedCall& call);

}  // namespace ringzip::compressed
