// Failure handling of RingzipBackend: mismatch check before each collective, poisoning of the
// group after a failed one, abort. Policy and figures: docs/reliability.md.
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "backend/backend.h"
#include "common/check.h"

namespace ringzip {

Fingerprint RingzipBackend::fingerprint(c10d::OpType type, const std::vector<at::Tensor>& outputs, uint32_t nseq,
                                        const FpExtra& extra) const {
  Fingerprint fp;
  fp.type = static_cast<uint16_t>(type);
  fp.nseq = nseq;
  // Ranks that disagree on the algorithm or hierarchy would run different schedules.
  fp.algo = static_cast<uint8_t>(static_cast<uint8_t>(planner_.algorithm()) | static_cast<uint8_t>(planner_.hierarchy())
                                                                                  << 4);
  if (extra.sized_by) {
    fp.set_tensors({*extra.sized_by});
  } else {
    fp.set_tensors(outputs);
  }
  if (extra.skip_sizes) {
    fp.numel = -1;
    fp.shapes = 0;
  }
  if (!extra.codec.empty()) fp.set_codec(extra.codec, extra.codec_hash);
  return fp;
}

std::exception_ptr RingzipBackend::run_checked(Comm& c, const Body& body, Fingerprint fp, uint64_t seq,
                                               CheckMode check) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty()) {  // queued before the failure: fail without touching the transport
      try {
        TORCH_CHECK_WITH(DistBackendError, false, "ringzip ", c.op, " (seq ", seq, ", rank ", rank_,
                         "): not run, the group became unusable after an earlier failure: ", broken_);
      } catch (...) {
        return std::current_exception();
      }
    }
  }
  stamp(fp, seq);
  const bool watched = check != CheckMode::Off && watch_;
  if (check != CheckMode::Off) c.tag_key = fp.tag_key();
  bool clean = false;  // failure found while the transport is still in step on all ranks
  std::exception_ptr err;
  try {
    if (check == CheckMode::On) {
      // Unwatched, as on the device path (precheck): the exchange finds a mismatch itself and
      // keeps the group usable. Watched, an exchange that took longer than the watch's stall
      // age on every rank (ranks on a loaded machine, 3 ranks under ThreadSanitizer) let the
      // watch diagnose the same mismatch first and break the transport.
      const MismatchInfo mm = exchange_fingerprints(c, fp, cfg_.group_name);
      if (mm.found) {
        clean = !mm.desync;
        TORCH_CHECK_WITH(DistBackendError, false, mm.message);
      }
    }
    if (watched) watch_->begin(fp);
    body(c);
  } catch (...) {
    err = std::current_exception();
  }
  if (watched) watch_->end();
  if (!err) return nullptr;
  // A mismatch found by the watch (here or on another rank) is why the transport failed.
  const std::string verdict = watched ? watch_->verdict() : std::string();
  if (!verdict.empty()) {
    try {
      TORCH_CHECK_WITH(DistBackendError, false, verdict);
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (!clean) poison(message_of(err));
  return err;
}

void RingzipBackend::stamp(Fingerprint& fp, uint64_t seq) const {
  fp.seq = seq;
  // Compressed calls take their RNG number when they start, in the order calls run (the same on
  // every rank); ranks that restored different error-feedback states would draw different
  // random-k indices, so the number joins the fingerprint.
  if (fp.codec[0] != 0) fp.codec_hash = static_cast<uint32_t>(fp.codec_hash * 0x9E3779B1u ^ comp_.next_call_number());
}

// The CUDA path's share of run_checked: the call is only issued on the caller's thread, so the
// stall watch learns its fingerprint (record) and the CUDA watchdog asks for the diagnosis
// when it stalls on the device; check="on" exchanges the records over the host transport
// (the CUDA call's own transport is stream-ordered: its bytes would need a host sync).
bool RingzipBackend::precheck(Fingerprint fp, uint64_t seq, CheckMode check, const std::string& op,
                              std::chrono::steady_clock::time_point deadline, bool& poison_after) {
  poison_after = false;
  stamp(fp, seq);
  if (check == CheckMode::Off || size_ < 2) return false;
  if (check == CheckMode::On) {
    Comm c{*net_, host_compute(), static_cast<uint32_t>(seq), deadline, op};
    MismatchInfo mm;
    try {
      mm = exchange_fingerprints(c, fp, cfg_.group_name);
    } catch (...) {
      poison_after = true;  // the host transport failed (Comm aborted it)
      throw;
    }
    if (mm.found) {
      poison_after = mm.desync;
      TORCH_CHECK_WITH(DistBackendError, false, mm.message);
    }
  }
  if (!watch_) return false;
  watch_->record(fp);
  return true;
}

std::string RingzipBackend::stalled(uint64_t seq) const { return watch_ ? watch_->stalled(seq) : std::string(); }

void RingzipBackend::enable_mismatch_watch(const c10::intrusive_ptr<c10d::Store>& store) {
  if (size_ < 2) return;
  watch_ = std::make_unique<MismatchWatch>(store, rank_, size_, cfg_.group_name,
                                           [this](const std::string& why) { poison(why); });
}

void RingzipBackend::poison(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.empty()) {
      const auto nl = why.find('\n');
      broken_ = nl == std::string::npos ? why : why.substr(0, nl);
      if (broken_.empty()) broken_ = "unknown error";
    }
  }
  net_->abort();
  for (auto& [type, path] : paths_) path->abort(why);
}

std::string RingzipBackend::broken_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void RingzipBackend::abort() {
  poison("the process group was aborted (abort())");
  shutdown();
}

}  // namespace ringzip
