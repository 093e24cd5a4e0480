#pragma once
// What one device type adds to the one dispatch of every collective (collectives.cc,
// exchanges.cc, backend.cc): where a call's working tensors live and how its body is issued and
// its Work completed. Host memory is built in (the group's worker thread; CUDA tensors staged
// through the host when no device path serves them). A CUDA build registers the CUDA path
// (backend/cuda/: internal streams, events, NCCL communicators, the watchdog) for CUDA tensors
// at load time, as PyTorch's Gloo backend registers its CUDA works; a group enables it when
// its options ask for it.
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/fingerprint.h"
#include "collective/comm.h"
#include "plan/plan.h"

namespace ringzip {

class RingzipBackend;

// A collective's algorithm, run over the call's Comm (the device's transport and compute); its
// tensors are the working copies on the path's device (Staged).
using Body = std::function<void(Comm&)>;

// One checked collective call as the dispatch hands it to a path.
struct Issue {
  c10d::OpType type;
  const char* name;
  std::vector<at::Tensor> outputs;  // the Work's result()
  std::vector<at::Tensor> inputs;   // read by the body besides the outputs (device paths keep them alive)
  std::chrono::milliseconds timeout;
  c10::Device device{c10::kCPU};  // where the call's tensors are (a device barrier: its device)
  bool async = true;
  Fingerprint fp;
  uint32_t nseq = 1;      // sequence numbers taken (coalesced calls: one per item)
  bool blocking = false;  // wait() blocks the host (a device barrier)
};

class DevicePath {
 public:
  virtual ~DevicePath() = default;
  // The planner's name for calls on this path.
  virtual Device kind() const = 0;
  // Issues `body` under the group's checks; the Work completes when the device has run it.
  // The body and what it captured live until then.
  virtual c10::intrusive_ptr<c10d::Work> issue(Issue call, Body body) = 0;
  // User point-to-point on the path's device (its own transport rules: NCCL matches in posting order).
  virtual c10::intrusive_ptr<c10d::Work> p2p(at::Tensor& t, int peer, bool send) = 0;
  // Poison: fail the works in flight, abort the device's communicators. Idempotent.
  virtual void abort(const std::string& why) = 0;
  // Group shutdown: join threads, release communicators. Idempotent.
  virtual void shutdown() = 0;
};

using DevicePathFactory =
    std::function<std::unique_ptr<DevicePath>(RingzipBackend&, const c10::intrusive_ptr<c10d::Store>&)>;
// Called once per device type by a static initializer of the device's sub-room; returns true.
bool register_device_path(c10::DeviceType type, DevicePathFactory make);
// The registered factory, or null (a build without that device).
const DevicePathFactory* device_path_factory(c10::DeviceType type);

}  // namespace ringzip
