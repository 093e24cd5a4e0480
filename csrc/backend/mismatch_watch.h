#pragma once
// Finds mismatched calls without a message on the data path (check="auto").
//
// Every call's tags carry a hash of its fingerprint (Comm::tag_key), so when the ranks' calls
// differ their messages never match: nothing is exchanged, the calls stall. A thread of this
// class polls the running call; once one has run for kStall, it publishes this rank's recent
// fingerprints in the group's store and compares them with those other stalled ranks published.
// A rank that finds a difference writes the message to the store (first writer wins, so every
// rank raises the same text) and breaks the transport, which fails the calls blocked on it; a
// rank whose call failed for any reason looks for that message before reporting the failure.
// Calls that finish within kStall cost two atomic stores and a 64-byte copy.
//
// CUDA calls return once issued, so they never "run" here: record() adds their fingerprints to
// the history, and the CUDA watchdog (backend/cuda/cuda_path.h) calls stalled() for the oldest
// call still pending on the device, at the same ages; the diagnosis and its message are the
// same, through the same store.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "backend/fingerprint.h"

namespace ringzip {

class MismatchWatch {
 public:
  static constexpr std::chrono::milliseconds kStall{250};
  static constexpr std::chrono::milliseconds kPoll{100};
  // The longest the watch waits for one answer of the store (mismatch_watch.cc ask): a store
  // on this host or a peer answers in milliseconds, a stopped one never.
  static constexpr std::chrono::milliseconds kStoreWait{1000};

  // `on_verdict` breaks the group's transport (it runs on the watch thread).
  MismatchWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::string group,
                std::function<void(const std::string&)> on_verdict);
  ~MismatchWatch();

  void begin(const Fingerprint& fp);  // fp.seq is the call's sequence number
  void end();
  // A call that does not run between begin() and end() (a CUDA call): history only.
  void record(const Fingerprint& fp);
  // Diagnoses the recorded call `seq`, stalled on the device (thread-safe); returns the group's
  // mismatch message if one is found (on_verdict has then run), else empty.
  std::string stalled(uint64_t seq);
  // The group's mismatch message (this rank's, or one another rank stored), or empty.
  std::string verdict();

 private:
  static constexpr int kHistory = 16;
  void loop();
  // device: the stalled call is a CUDA call (NCCL matches messages by order, not by tags).
  void diagnose(uint64_t seq, bool device);
  std::string find_mismatch(const std::vector<std::vector<Fingerprint>>& histories, bool device) const;

  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_, size_;
  const std::string group_;
  std::function<void(const std::string&)> on_verdict_;

  std::atomic<uint64_t> running_{0};  // seq + 1 of the running call; 0: none
  std::atomic<int64_t> started_ns_{0};

  std::mutex mu_;  // guards history_, recorded_, verdict_
  std::array<Fingerprint, kHistory> history_{};
  uint64_t recorded_ = 0;
  std::string verdict_;

  std::mutex diag_mu_;      // one diagnosis at a time (watch thread, CUDA watchdog)
  uint64_t published_ = 0;  // seq + 1 of the last call whose history went to the store; diag_mu_

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ringzip
