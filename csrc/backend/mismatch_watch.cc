#include "backend/mismatch_watch.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <stdexcept>

namespace ringzip {
namespace {

using Bytes = std::vector<uint8_t>;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs op(store) on a thread of its own and waits kStoreWait for it. A store whose host stopped
// (SIGSTOP, a hung machine) keeps its connection open and answers nothing until the store's own
// timeout -- minutes for some callers -- and a diagnosis must never hold up the failure it
// explains or the group's shutdown: a survivor of a stopped store host hung 150 s in the
// failure path. An abandoned operation ends on its thread, which owns what it uses.
template <class Op>
auto ask(const c10::intrusive_ptr<c10d::Store>& store, Op op) {
  using T = decltype(op(*store));
  auto task = std::make_shared<std::packaged_task<T()>>([store, op] { return op(*store); });
  std::future<T> answer = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (answer.wait_for(MismatchWatch::kStoreWait) != std::future_status::ready)
    throw std::runtime_error("the store did not answer");
  return answer.get();
}

std::vector<Fingerprint> parse(const Bytes& b) {
  std::vector<Fingerprint> out(b.size() / sizeof(Fingerprint));
  if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(Fingerprint));
  return out;
}

}  // namespace

MismatchWatch::MismatchWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::string group,
                             std::function<void(const std::string&)> on_verdict)
    : rank_(rank), size_(size), group_(std::move(group)), on_verdict_(std::move(on_verdict)) {
  // Keys of an earlier group on the same store (destroy_process_group, then init again under
  // the same name) must not be read as this one's: every incarnation gets its own prefix. All
  // ranks of one incarnation add before any rank can create the next (creation connects them).
  const int64_t joined = store->add("incarnations", 1);
  const int64_t incarnation = (joined - 1) / size;
  store_ = c10::make_intrusive<c10d::PrefixStore>(std::to_string(incarnation) + "/", std::move(store));
  thread_ = std::thread([this] { loop(); });
}

MismatchWatch::~MismatchWatch() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MismatchWatch::begin(const Fingerprint& fp) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    history_[recorded_++ % kHistory] = fp;
  }
  started_ns_.store(now_ns(), std::memory_order_relaxed);
  running_.store(fp.seq + 1, std::memory_order_release);
}

void MismatchWatch::end() { running_.store(0, std::memory_order_release); }

void MismatchWatch::record(const Fingerprint& fp) {
  std::lock_guard<std::mutex> lock(mu_);
  history_[recorded_++ % kHistory] = fp;
}

std::string MismatchWatch::stalled(uint64_t seq) {
  try {
    diagnose(seq, /*device=*/true);
  } catch (...) {
    // The store is unreachable: the call fails by its own timeout.
  }
  std::lock_guard<std::mutex> lock(mu_);
  return verdict_;
}

std::string MismatchWatch::verdict() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!verdict_.empty()) return verdict_;
  }
  try {
    return ask(store_, [](c10d::Store& s) {
      if (!s.check({"verdict"})) return std::string();
      const Bytes v = s.get("verdict");
      return std::string(v.begin(), v.end());
    });
  } catch (...) {
    return {};  // the store went with a dead or stopped rank: report the failure as it is
  }
}

void MismatchWatch::loop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  uint64_t call = 0;
  int64_t next_ns = 0;
  while (!stop_) {
    stop_cv_.wait_for(lock, kPoll);
    if (stop_) break;
    const uint64_t run = running_.load(std::memory_order_acquire);
    if (run == 0) continue;
    const int64_t age = now_ns() - started_ns_.load(std::memory_order_relaxed);
    if (run != call) {  // a new call: first look after kStall, then at doubling ages
      call = run;
      next_ns = std::chrono::nanoseconds(kStall).count();
    }
    if (age < next_ns) continue;
    next_ns *= 2;
    lock.unlock();
    try {
      diagnose(run - 1, /*device=*/false);
    } catch (...) {
      // The store is unreachable (its host died): the call fails by its own timeout.
    }
    lock.lock();
  }
}

void MismatchWatch::diagnose(uint64_t seq, bool device) {
  std::lock_guard<std::mutex> diag(diag_mu_);
  std::string found = verdict();
  if (found.empty()) {
    std::vector<std::vector<Fingerprint>> histories(size_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t first = recorded_ > kHistory ? recorded_ - kHistory : 0;
      for (uint64_t i = first; i < recorded_; ++i) histories[rank_].push_back(history_[i % kHistory]);
    }
    if (published_ != seq + 1) {
      const auto* p = reinterpret_cast<const uint8_t*>(histories[rank_].data());
      const Bytes mine(p, p + histories[rank_].size() * sizeof(Fingerprint));
      ask(store_, [key = "h/" + std::to_string(rank_), mine](c10d::Store& s) { return (s.set(key, mine), 0); });
      published_ = seq + 1;
    }
    const std::vector<Bytes> theirs = ask(store_, [n = size_, me = rank_](c10d::Store& s) {
      std::vector<Bytes> out(n);
      for (int j = 0; j < n; ++j) {
        const std::string key = "h/" + std::to_string(j);
        if (j != me && s.check({key})) out[j] = s.get(key);
      }
      return out;
    });
    for (int j = 0; j < size_; ++j)
      if (j != rank_) histories[j] = parse(theirs[j]);
    const std::string mine = find_mismatch(histories, device);
    if (mine.empty()) return;
    const Bytes won = ask(
        store_, [mine](c10d::Store& s) { return s.compareSet("verdict", {}, Bytes(mine.begin(), mine.end())); });
    found.assign(won.begin(), won.end());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (verdict_.empty()) verdict_ = found;
  }
  on_verdict_(found);
}

// The earliest call that two ranks both recorded, differently.
std::string MismatchWatch::find_mismatch(const std::vector<std::vector<Fingerprint>>& histories, bool device) const {
  std::map<uint64_t, std::vector<const Fingerprint*>> by_seq;
  for (int j = 0; j < size_; ++j) {
    for (const Fingerprint& f : histories[j]) {
      auto& row = by_seq[f.seq];
      if (row.empty()) row.resize(size_, nullptr);
      row[j] = &f;
    }
  }
  for (const auto& [seq, row] : by_seq) {
    if (std::count(row.begin(), row.end(), nullptr) >= size_ - 1) continue;
    std::string msg = mismatch_message(row, rank_, group_, /*group_survives=*/false, nullptr, /*keyed_tags=*/!device);
    if (!msg.empty()) return msg;
  }
  return {};
}

}  // namespace ringzip
