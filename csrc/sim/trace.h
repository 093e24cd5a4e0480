#pragma once
// What the ranks of one recorded call did, in order (transport/loopback/recording.h records it;
// sim/replay.h replays it on a model of other links and kernels).
#include <cstdint>
#include <string>
#include <vector>

namespace ringzip::sim {

// Send / Recv: a post (peer, amount = bytes, id: the request's number in the rank's posting
// order, tag); Wait: the lane waits for request id. Mark: the lane reached point id of the
// schedule's own hand-offs between a rank's threads; After: the lane waits until point id was
// reached. The rest are kernels: Copy, Zero (amount in bytes), Reduce, Scale (bytes of the
// dtype), the others in elements; ReduceEncode's peer is the number of encodings it decodes.
enum class Kind : uint8_t {
  Send, Recv, Wait, Mark, After, Copy, Zero, Reduce, Scale, Residual, DropNonfinite, Encode, Decode,
  DecodeAccumulate, DecodeAddEncode, ReduceEncode, DecodeResidual, EncodeFeedback, TopkFeedback, RandomkValues, Count
};
constexpr int kKinds = static_cast<int>(Kind::Count);

const char* kind_name(Kind k);
Kind kind_of(const std::string& name);  // std::invalid_argument for an unknown name

struct Event {
  Kind kind;
  int32_t peer = -1;
  uint32_t tag = 0;
  int64_t id = -1;
  uint64_t amount = 0;
  uint8_t lane = 0;  // the rank's thread that issued it (0: the call's own; node-aware pipelines add one)
};

struct Trace {
  std::vector<std::vector<Event>> ranks;
};

}  // namespace ringzip::sim
