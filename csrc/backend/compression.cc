#include "backend/compression.h"

namespace ringzip {

bool compressible(const CompressionConfig& cc, const at::Tensor& t, const c10d::ReduceOp& op) {
  const auto st = t.scalar_type();
  const bool fp = st == at::kFloat || st == at::kHalf || st == at::kBFloat16;
  const bool summing = op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG ||
                       op.op_ == c10d::ReduceOp::PREMUL_SUM;
  return cc.enabled() && fp && summing && t.numel() >= cc.min_numel;
}

at::Tensor Compression::residual_for(const at::Tensor& t, int64_t numel, at::Device device) {
  const std::string key = std::to_string(reinterpret_cast<uintptr_t>(t.storage().unsafeGetStorageImpl())) + ":" +
                          std::to_string(t.storage_offset()) + ":" + std::to_string(numel);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = residuals_.find(key);
  if (it != residuals_.end() && !it->second.owner.expired()) return it->second.residual;
  if (it != residuals_.end()) residuals_.erase(it);  // storage freed and its address reused
  c10::weak_intrusive_ptr<c10::StorageImpl> owner(t.storage().getWeakStorageImpl());
  for (auto e = residuals_.begin(); e != residuals_.end(); ++e) {
    if (e->second.owner.expired() && e->second.residual.numel() == numel && e->second.residual.device() == device) {
      Entry inherited{e->second.slot, e->second.residual, owner};
      residuals_.erase(e);
      residuals_.emplace(key, inherited);
      return inherited.residual;
    }
  }
  const int64_t slot = next_slot_++;
  at::Tensor r;
  auto l = loaded_.find(slot);
  if (l != loaded_.end() && l->second.numel() == numel) {
    r = l->second.to(device, at::kFloat).contiguous().clone();
    loaded_.erase(l);
  } else {
    r = at::zeros({numel}, at::TensorOptions().dtype(at::kFloat).device(device));
  }
  residuals_.emplace(key, Entry{slot, r, owner});
  return r;
}

void Compression::record(const std::string& codec, const CodecStats& d) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = stats_[codec];
  s.calls += d.calls;
  s.bytes_in += d.bytes_in;
  s.bytes_sent += d.bytes_sent;
  s.bytes_dense_equiv += d.bytes_dense_equiv;
  s.codec_seconds += d.codec_seconds;
  s.total_seconds += d.total_seconds;
  s.overflows += d.overflows;
}

std::map<std::string, CodecStats> Compression::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Compression::reset_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.clear();
}

std::vector<std::tuple<int64_t, at::Tensor>> Compression::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::tuple<int64_t, at::Tensor>> out;
  for (const auto& [key, e] : residuals_) out.emplace_back(e.slot, e.residual.clone());
  for (const auto& [slot, r] : loaded_) out.emplace_back(slot, r.clone());  // restored, not yet used
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  return out;
}

void Compression::load_state(const std::vector<std::tuple<int64_t, at::Tensor>>& state) {
  std::lock_guard<std::mutex> lock(mu_);
  residuals_.clear();
  loaded_.clear();
  next_slot_ = 0;
  for (const auto& [slot, r] : state) loaded_[slot] = r;
}

int64_t Compression::residual_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t b = 0;
  for (const auto& [key, e] : residuals_) b += e.residual.nbytes();
  return b;
}

}  // namespace ringzip
