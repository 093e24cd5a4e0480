#pragma once
// Mismatch check: before a collective's payload moves, every rank learns every other rank's
// fingerprint of the call (collective type, dtype, element count, shapes, reduce op, root,
// codec settings, sequence slot) through a star allgather of fixed-size records, and
// all ranks raise the same error naming the difference. Records have the same size on every
// rank whatever the call, so the exchange itself cannot be confused by the mismatch it finds.
// Cost and modes: docs/reliability.md.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collective/comm.h"

namespace ringzip {

struct Fingerprint {
  uint32_t magic = 0x525A4631;  // "RZF1"
  uint16_t type = 0;            // c10d::OpType
  uint8_t dtype = 0xFF;         // at::ScalarType of the data; 0xFF: none
  uint8_t op = 0xFF;            // c10d::ReduceOp::RedOpType; 0xFF: none
  int32_t root = -1;
  uint32_t nseq = 1;  // sequence numbers the call takes (coalesced calls: one per item)
  uint64_t seq = 0;
  int64_t numel = -1;   // elements per rank; -1: not compared (all-to-all splits)
  uint64_t shapes = 0;  // hash of every tensor's element count and dtype, in order
  uint8_t algo = 0;     // dense all-reduce algorithm setting
  uint8_t reserved[3] = {};
  uint32_t codec_hash = 0;  // bucket size, rounding, seed, compressed algorithm
  char codec[16] = {};      // codec name; empty: exact

  // Fills dtype, numel and shapes from `tensors` (numel: their total element count).
  void set_tensors(const std::vector<at::Tensor>& tensors);
  void set_codec(const std::string& name, uint32_t settings_hash);
  std::string describe() const;
  // 14 bits mixed into the call's tags (Comm::tag_key): a hash of every field but seq, which
  // the tags hold already. Two different calls share it with probability 2^-14.
  uint32_t tag_key() const;
};
static_assert(sizeof(Fingerprint) == 64, "fingerprint records are fixed-size on the wire");

// What a caller may add to the fingerprint derived from the call's tensors and options.
struct FpExtra {
  const at::Tensor* sized_by = nullptr;  // fingerprint this tensor instead of the outputs
  bool skip_sizes = false;               // sizes legitimately differ by rank (all-to-all)
  std::string codec;                     // compressed calls: codec name
  uint32_t codec_hash = 0;
};

// Thrown (as c10::DistBackendError) when the ranks' fingerprints differ. `desync` is true when
// the ranks consumed different numbers of sequence numbers: the group cannot continue.
struct MismatchInfo {
  bool found = false;
  bool desync = false;
  std::string message;
};

// The one message of a mismatch: `by_rank[j]` is rank j's record of the call (nullptr where
// unknown); names the lowest rank and the lowest rank whose record differs from it. Empty when
// the known records agree. `desync` reports a divergence of the ranks' call sequences.
// `keyed_tags`: the calls' messages carried tag keys (host transports), so none were exchanged;
// false for calls on the NCCL transport, which matches messages by order.
std::string mismatch_message(const std::vector<const Fingerprint*>& by_rank, int detected_on, const std::string& group,
                             bool group_survives, bool* desync = nullptr, bool keyed_tags = true);

// Exchanges fingerprints over the group (rank 0 gathers the records and sends all of them
// back: two rounds) and compares them. Transport failures throw like any collective step.
MismatchInfo exchange_fingerprints(Comm& c, const Fingerprint& mine, const std::string& group);

}  // namespace ringzip
