#pragma once
// The compression state of one group: the error-feedback residuals, the compressed-call
// counter, and the per-codec counters behind ringzip.stats(). Which calls are compressed is the
// planner's decision (plan/plan.h).
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "plan/options.h"
#include "collective/compressed.h"

namespace ringzip {

struct CodecStats {
  uint64_t calls = 0;
  uint64_t bytes_in = 0;           // caller's tensor bytes
  uint64_t bytes_sent = 0;         // this rank's bytes on the wire
  uint64_t bytes_dense_equiv = 0;  // what an exact ring all-reduce would have sent
  double codec_seconds = 0;
  double total_seconds = 0;
  // fp16 (host path): calls whose result held Inf/NaN although this rank's input was finite --
  // values or sums beyond fp16's largest finite 65504 became inf on the wire (or another rank's
  // input already held Inf/NaN, e.g. an AMP overflow step).
  uint64_t overflows = 0;
  uint64_t bytes_intra_node = 0;  // node-aware calls: the exact steps inside the node (bytes_sent: between nodes)
};

// Error-feedback residuals and the compressed-call counter of one group.
//
// Counter. Every compressed call takes the next number of the group's compressed-call
// counter when it starts, in the order the group runs calls (the same on every rank; CUDA
// calls: in issue order). The number keys the
// RNG of the call's codecs (Philox counter word c2: stochastic rounding, random-k selection),
// so the stream depends only on how many compressed calls came before: exact collectives (DDP's
// setup broadcasts, a checkpoint's own collectives) don't move it, and restoring the counter
// resumes the stream where it stopped. Tags still use the collective sequence number.
//
// Residuals. A residual belongs to the tensor it was made for while that tensor lives (its
// storage, offset and size: DDP's bucket buffers keep theirs from step to step). A tensor seen
// for the first time takes over, in this order,
//   1. an *awaiting* residual of its size: one restored from a checkpoint whose tensor was
//      alive when the state was saved, or one released by release(), the least recently used
//      first -- so the calls after a restart, which come in the order of the last step before
//      the checkpoint, get the residuals of that step's calls in that order, even where several
//      tensors have one size;
//   2. a *free* residual of its size (its tensor is gone: the pattern of a fresh gradient tensor
//      each step), the least recently used first, which is the one of the same position in the
//      previous step;
//   3. else a new zero residual.
// The state (state(), load_state()) is the counter and every residual with its last use and
// whether its tensor was alive: nothing in it depends on addresses, so it loads into a new
// process and replays there as it would have gone on in the old one, given the same calls.
class Compression {
 public:
  struct Call {
    uint64_t number = 0;  // in this group's sequence of compressed calls: keys the RNG
    at::Tensor residual;  // undefined without error feedback
  };
  // Takes the next call number and, with `feedback`, the residual of `t` (numel floats on
  // `device`). `t` names the residual; the call may compress a copy of it.
  Call begin_call(const at::Tensor& t, int64_t numel, bool feedback, at::Device device = at::kCPU);
  // The number the next begin_call takes.
  uint64_t next_call_number() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // The residuals of these tensors become awaiting (rule 1 above): the next new tensors of
  // their sizes take them, in order of last use. For calls made on stand-in tensors (the
  // first DDP step after a restart, replayed in the checkpointed bucket layout).
  void release(const std::vector<at::Tensor>& tensors);

  void record(const std::string& codec, const CodecStats& delta);
  std::map<std::string, CodecStats> stats() const;
  void reset_stats();
  int64_t residual_bytes() const;

  struct SavedResidual {
    uint64_t last_use = 0;  // number of the latest call that used it
    bool bound = false;     // its tensor was alive (or it was awaiting one)
    at::Tensor values;      // float32, 1-D
  };
  struct State {
    uint64_t calls = 0;                    // compressed calls so far: the next call's number
    std::vector<SavedResidual> residuals;  // by last use
  };
  State state() const;  // copies
  void load_state(const State& state);

 private:
  enum class Bind { Live, Awaiting, Free };
  struct Entry {
    at::Tensor residual;
    uint64_t last_use = 0;
    Bind bind = Bind::Free;
    std::string key;  // Live: storage, offset, size
    c10::weak_intrusive_ptr<c10::StorageImpl> owner{c10::intrusive_ptr<c10::StorageImpl>()};  // Live
    bool live() const { return bind == Bind::Live && !owner.expired(); }
    bool free() const { return bind == Bind::Free || (bind == Bind::Live && owner.expired()); }
  };
  static std::string key_of(const at::Tensor& t, int64_t numel);

  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // a few per group (DDP: one per bucket): scanned linearly
  uint64_t calls_ = 0;
  std::map<std::string, CodecStats> stats_;
};

}  // namespace ringzip
