// The CUDA device path (backend/device_path.h), registered for CUDA tensors: a checked call's
// body runs on the calling thread, on the device's internal stream (which first waits for the
// caller's current stream), over the NCCL transport with the CUDA compute, under the group's
// checks (fingerprint, sequence numbers, the watchdog's deadline, poison, abort).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_path.h"
#include "backend/tensors.h"
#include "collective/cuda_compute.h"
#include "common/check.h"

namespace ringzip {
namespace {

class CudaDevicePath final : public DevicePath {
 public:
  CudaDevicePath(RingzipBackend& b, const c10::intrusive_ptr<c10d::Store>& store) : b_(b) {
    CudaPath::Hooks hooks;
    hooks.fail = [&b](const std::string& why) { b.poison(why); };
    hooks.diagnose = [&b](uint64_t seq) { return b.stalled(seq); };
    cuda_ = std::make_shared<CudaPath>(store, b.getRank(), b.getSize(), b.config().group_name, std::move(hooks));
  }

  Device kind() const override { return Device::Cuda; }

  c10::intrusive_ptr<c10d::Work> issue(Issue call, Body body) override { return run(std::move(call), body, false); }

  // On the group's communicator and internal stream: NCCL matches a pair's sends and receives in
  // posting order (tags are not sent), and a receive holds the stream until its send arrives.
  c10::intrusive_ptr<c10d::Work> p2p(at::Tensor& t, int peer, bool send) override {
    Issue call{send ? c10d::OpType::SEND : c10d::OpType::RECV, send ? "send" : "recv", {t}, {}, b_.config().timeout};
    call.device = t.device();
    auto s = send ? Staged::in(t, t.device()) : Staged::out(t, t.device());
    return run(
        std::move(call),
        [s, peer, send](Comm& c) {
          if (send) {
            c.net.isend(s.work.data_ptr(), s.work.nbytes(), peer, 0);
            return;
          }
          c.net.irecv(s.work.data_ptr(), s.work.nbytes(), peer, 0);
          static_cast<NcclTransport&>(c.net).flush();  // the receive is issued before the copy below
          s.finish();
        },
        true);
  }

  void abort(const std::string& why) override { cuda_->abort(why); }
  void shutdown() override { cuda_->stop(); }

 private:
  c10::intrusive_ptr<c10d::Work> run(Issue call, const Body& body, bool p2p);

  RingzipBackend& b_;
  std::shared_ptr<CudaPath> cuda_;
  std::atomic<uint64_t> p2p_seq_{0};  // point-to-point calls (their own numbering)
};

c10::intrusive_ptr<c10d::Work> CudaDevicePath::run(Issue call, const Body& body, bool p2p) {
  b_.check_usable(call.name);
  const c10::Device dev = call.device;
  RZ_CHECK_VALUE(dev.is_cuda() && dev.has_index(), call.name, ": the CUDA path needs a CUDA device with an index, got ",
                 dev);
  const std::string where = std::string(call.name) + " on group '" + b_.config().group_name + "'";
  c10::intrusive_ptr<CudaWork> work;
  bool poison_after = false;
  std::exception_ptr err;
  {
    std::unique_lock<std::timed_mutex> lock(cuda_->mutex());  // one issue order (NCCL matches by order)
    const uint64_t seq = p2p ? p2p_seq_.fetch_add(1) : b_.take_seq(call.nseq);
    const auto deadline = std::chrono::steady_clock::now() + call.timeout;
    try {
      bool diagnosable = false;
      if (!p2p) diagnosable = b_.precheck(call.fp, seq, b_.check_mode(), where, deadline, poison_after);
      poison_after = true;  // from here on a failure leaves the transport in an unknown state
      CudaDevice& d = cuda_->device(dev.index(), call.timeout, where);
      c10::cuda::CUDAGuard dg(dev);
      work = c10::make_intrusive<CudaWork>(b_.getRank(), b_.getSize(), call.type, call.name, b_.config().group_name,
                                           call.outputs, seq, call.timeout, dev, call.blocking);
      work->begin(c10::cuda::getCurrentCUDAStream(dev.index()), d.stream);
      // The caching allocator must not hand these blocks to other streams before the work is done.
      for (const auto* list : {&call.inputs, &call.outputs})
        for (const auto& t : *list)
          if (t.defined() && t.is_cuda() && t.storage().data_ptr().get())
            c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), d.stream);
      work->keep(body);
      cuda_->track(work, d.comm, diagnosable);  // its deadline runs from now on, even while issuing
      {
        c10::cuda::CUDAStreamGuard sg(d.stream);
        NcclTransport net(d.comm, d.stream.stream());
        auto compute = make_cuda_compute(d.stream);
        Comm c{net, *compute, static_cast<uint32_t>(seq), deadline, where};
        body(c);
        net.flush();
      }
      work->enqueued(d.stream);
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (err) {
    // Raised on the caller's thread; a failure after the first NCCL call may have left peers
    // waiting for this rank, so the group is poisoned (their watchdogs fire at their deadlines).
    // A call the watchdog failed meanwhile (its abort unblocked an issue stuck in NCCL) raises
    // the watchdog's error.
    if (work && work->failed()) err = work->exception();
    if (poison_after) {
      b_.poison(message_of(err));
      if (work) work->done(err);
    }
    std::rethrow_exception(err);
  }
  return work;
}

const bool registered = register_device_path(
    c10::kCUDA, [](RingzipBackend& b, const c10::intrusive_ptr<c10d::Store>& store) -> std::unique_ptr<DevicePath> {
      return std::make_unique<CudaDevicePath>(b, store);
    });

}  // namespace
}  // namespace ringzip
