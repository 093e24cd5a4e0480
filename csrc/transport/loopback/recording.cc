#include "transport/loopback/recording.h"

#include <algorithm>

namespace ringzip {

int64_t RankLog::add(sim::Event e, bool new_request) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto me = std::this_thread::get_id();
  auto it = std::find(lanes_.begin(), lanes_.end(), me);
  if (it == lanes_.end()) it = lanes_.insert(lanes_.end(), me);
  e.lane = static_cast<uint8_t>(it - lanes_.begin());
  if (new_request) e.id = requests_++;
  out_.push_back(e);
  return e.id;
}

namespace {

class RecordingRequest final : public Request {
 public:
  RecordingRequest(std::unique_ptr<Request> inner, std::shared_ptr<RankLog> log, int64_t id)
      : inner_(std::move(inner)), log_(std::move(log)), id_(id) {}
  void wait(std::chrono::milliseconds timeout) override {
    if (!waited_) log_->add({sim::Kind::Wait, -1, 0, id_, 0});
    waited_ = true;
    inner_->wait(timeout);
  }
  int source() const override { return inner_->source(); }

 private:
  std::unique_ptr<Request> inner_;
  std::shared_ptr<RankLog> log_;
  int64_t id_;
  bool waited_ = false;
};

class RecordingTransport final : public Transport {
 public:
  RecordingTransport(std::unique_ptr<Transport> inner, std::shared_ptr<RankLog> log)
      : inner_(std::move(inner)), log_(std::move(log)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  int group_rank(int i) const override { return inner_->group_rank(i); }
  int group_size() const override { return inner_->group_size(); }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override {
    return logged(sim::Kind::Send, inner_->isend(data, bytes, peer, tag), bytes, peer, tag);
  }
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override {
    return logged(sim::Kind::Recv, inner_->irecv(data, bytes, peer, tag), bytes, peer, tag);
  }
  // A replay could not tell which send such a receive meets: schedules never post one.
  std::unique_ptr<Request> irecv_any(void*, size_t, uint32_t) override {
    throw std::logic_error("a recorded run cannot receive from any source");
  }
  void group_start() override { inner_->group_start(); }
  void group_end() override { inner_->group_end(); }
  bool eager_receives() const override { return inner_->eager_receives(); }
  int lookahead() const override { return inner_->lookahead(); }
  double round_trip() const override { return inner_->round_trip(); }  // schedules cut by the link
  void abort() override { inner_->abort(); }
  void close() override { inner_->close(); }
  NativeCollectives* native() override { return inner_->native(); }
  void mark(int64_t point, bool reached) override {
    log_->add({reached ? sim::Kind::Mark : sim::Kind::After, -1, 0, point, 0});
    inner_->mark(point, reached);
  }

 private:
  std::unique_ptr<Request> logged(sim::Kind kind, std::unique_ptr<Request> req, size_t bytes, int peer,
                                  uint32_t tag) {
    const int64_t id = log_->add({kind, peer, tag, -1, bytes}, true);
    return std::make_unique<RecordingRequest>(std::move(req), log_, id);
  }
  std::unique_ptr<Transport> inner_;
  std::shared_ptr<RankLog> log_;
};

class RecordingCompute final : public Compute {
 public:
  RecordingCompute(Compute& inner, std::shared_ptr<RankLog> log) : in_(inner), log_(std::move(log)) {}
  std::shared_ptr<uint8_t> alloc(size_t bytes) override { return in_.alloc(bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    note(sim::Kind::Copy, bytes);
    in_.copy(dst, src, bytes);
  }
  void to_device(void* dst, const void* host, size_t bytes) override { in_.to_device(dst, host, bytes); }
  void to_host(void* host, const void* src, size_t bytes) override { in_.to_host(host, src, bytes); }
  void sync() override { in_.sync(); }
  void zero(void* dst, size_t bytes) override {
    note(sim::Kind::Zero, bytes);
    in_.zero(dst, bytes);
  }
  void reduce_into(DType t, RedOp op, void* acc, const void* in, size_t n) override {
    note(sim::Kind::Reduce, n * dtype_size(t));
    in_.reduce_into(t, op, acc, in, n);
  }
  void scale(DType t, void* data, size_t n, double factor) override {
    note(sim::Kind::Scale, n * dtype_size(t));
    in_.scale(t, data, n, factor);
  }
  void residual(float* r, const float* x, size_t n) override {
    note(sim::Kind::Residual, n);
    in_.residual(r, x, n);
  }
  void drop_nonfinite(float* r, size_t n) override {
    note(sim::Kind::DropNonfinite, n);
    in_.drop_nonfinite(r, n);
  }
  void encode(const codec::Spec& s, codec::InType t, const void* x, int64_t n, int64_t off, const codec::RngKey& k,
              uint8_t* out) override {
    note(sim::Kind::Encode, n);
    in_.encode(s, t, x, n, off, k, out);
  }
  void decode(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off, const codec::RngKey& k,
              float* out) override {
    note(sim::Kind::Decode, n);
    in_.decode(s, in, bytes, n, off, k, out);
  }
  void decode_accumulate(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                         const codec::RngKey& k, float* acc) override {
    note(sim::Kind::DecodeAccumulate, n);
    in_.decode_accumulate(s, in, bytes, n, off, k, acc);
  }
  void decode_add_encode(const codec::Spec& s, const uint8_t* in, size_t bytes, const float* local, int64_t n,
                         int64_t off, const codec::RngKey& dk, const codec::RngKey& ek, uint8_t* out) override {
    note(sim::Kind::DecodeAddEncode, n);
    in_.decode_add_encode(s, in, bytes, local, n, off, dk, ek, out);
  }
  // The inner compute's own (possibly fused) versions, logged as one step, not as the steps
  // Compute's defaults would log through this wrapper.
  bool reduce_encode(const codec::Spec& s, const uint8_t* const* in, size_t bytes, int m, const codec::RngKey* dk,
                     float* acc, int64_t n, int64_t off, const codec::RngKey& ek, uint8_t* out, float* r) override {
    log_->add({sim::Kind::ReduceEncode, m, 0, -1, static_cast<uint64_t>(n)});
    return in_.reduce_encode(s, in, bytes, m, dk, acc, n, off, ek, out, r);
  }
  bool decode_residual(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                       const codec::RngKey& k, const float* x, float* r) override {
    note(sim::Kind::DecodeResidual, n);
    return in_.decode_residual(s, in, bytes, n, off, k, x, r);
  }
  bool encode_feedback(const codec::Spec& s, const float* x, float* r, int64_t n, int64_t off, const codec::RngKey& k,
                       uint8_t* out, bool& finite) override {
    const bool done = in_.encode_feedback(s, x, r, n, off, k, out, finite);
    if (done) note(sim::Kind::EncodeFeedback, n);
    return done;
  }
  bool topk_feedback(const codec::Spec& s, float* x, float* r, int64_t n, uint8_t* out, bool& finite) override {
    const bool done = in_.topk_feedback(s, x, r, n, out, finite);
    if (done) note(sim::Kind::TopkFeedback, n);
    return done;
  }
  void randomk_to_values(const uint8_t* payload, size_t k, float* vals) override {
    note(sim::Kind::RandomkValues, k);
    in_.randomk_to_values(payload, k, vals);
  }
  void randomk_from_values(const float* vals, size_t k, uint8_t* payload) override {
    note(sim::Kind::RandomkValues, k);
    in_.randomk_from_values(vals, k, payload);
  }

 private:
  void note(sim::Kind kind, uint64_t amount) { log_->add({kind, -1, 0, -1, amount}); }
  Compute& in_;
  std::shared_ptr<RankLog> log_;
};

}  // namespace

std::unique_ptr<Transport> make_recording_transport(std::unique_ptr<Transport> inner, std::shared_ptr<RankLog> log) {
  return std::make_unique<RecordingTransport>(std::move(inner), std::move(log));
}

std::unique_ptr<Compute> make_recording_compute(Compute& inner, std::shared_ptr<RankLog> log) {
  return std::make_unique<RecordingCompute>(inner, std::move(log));
}

}  // namespace ringzip
