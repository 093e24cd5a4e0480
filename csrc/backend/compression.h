#pragma once
// The compression policy of one group: which all-reduces are compressed (float dtypes, SUM /
// AVG / PREMUL_SUM, at least min_numel elements), the error-feedback residuals, and the
// per-codec counters behind ringzip.stats().
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "collective/compressed.h"

namespace ringzip {

struct CompressionConfig {
  std::string codec = "none";
  int64_t bucket_size = 512;
  bool stochastic = true;
  int64_t min_numel = 65536;  // 256 KiB of float32: below, compression loses to dense (bench/results)
  std::optional<bool> error_feedback;  // nullopt: on for biased codecs
  uint64_t seed = 0;
  CompressedAlgo algorithm = CompressedAlgo::Auto;
  int64_t topk_block = int64_t(1) << 20;  // top-k selects per block of this many elements; 0: whole tensor

  // Parsed once when the settings change (RingzipBackend::set_compression), not per call.
  codec::Spec parsed;
  const codec::Spec& spec() const { return parsed; }
  bool enabled() const { return codec != "none"; }
  bool feedback() const { return error_feedback.value_or(codec::biased(spec())); }
};

// The policy: float32/float16/bfloat16, SUM/AVG/PREMUL_SUM, at least min_numel elements.
bool compressible(const CompressionConfig& cc, const at::Tensor& t, const c10d::ReduceOp& op);

struct CodecStats {
  uint64_t calls = 0;
  uint64_t bytes_in = 0;          // caller's tensor bytes
  uint64_t bytes_sent = 0;        // this rank's bytes on the wire
  uint64_t bytes_dense_equiv = 0; // what an exact ring all-reduce would have sent
  double codec_seconds = 0;
  double total_seconds = 0;
  // fp16 (host path): calls whose result held Inf/NaN although this rank's input was finite --
  // values or sums beyond fp16's largest finite 65504 became inf on the wire (or another rank's
  // input already held Inf/NaN, e.g. an AMP overflow step).
  uint64_t overflows = 0;
};

class Compression {
 public:
  // Residual buffer of `numel` floats for tensor `t`, keyed by its storage and offset, so
  // DDP's bucket buffers reuse theirs from step to step. A tensor seen for the first time
  // inherits the residual of a freed tensor of the same size (the pattern of a fresh gradient
  // tensor each step), which also bounds the memory to the tensors alive at once.
  at::Tensor residual_for(const at::Tensor& t, int64_t numel, at::Device device = at::kCPU);
  void record(const std::string& codec, const CodecStats& delta);
  std::map<std::string, CodecStats> stats() const;
  void reset_stats();
  // Error-feedback state: slot -> residual (slots number tensors by first use).
  std::vector<std::tuple<int64_t, at::Tensor>> state() const;
  void load_state(const std::vector<std::tuple<int64_t, at::Tensor>>& state);
  int64_t residual_bytes() const;

 private:
  struct Entry {
    int64_t slot;
    at::Tensor residual;
    c10::weak_intrusive_ptr<c10::StorageImpl> owner;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> residuals_;
  std::map<int64_t, at::Tensor> loaded_;  // restored residuals awaiting their tensor
  int64_t next_slot_ = 0;
  std::map<std::string, CodecStats> stats_;
};

}  // namespace ringzip
