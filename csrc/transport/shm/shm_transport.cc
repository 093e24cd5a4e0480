#include "transport/shm/shm_transport.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "transport/shm/engine.h"
#include "transport/shm/segment.h"

namespace ringzip {
namespace {

using shm::Engine;
using shm::Op;

class ShmRequest final : public Request {
 public:
  ShmRequest(std::shared_ptr<Engine> e, std::shared_ptr<Op> op) : e_(std::move(e)), op_(std::move(op)) {}
  ~ShmRequest() override { e_->drop(*op_); }  // no-op once finished
  void wait(std::chrono::milliseconds timeout) override { e_->wait(*op_, timeout); }
  int source() const override { return op_->send ? -1 : op_->peer; }

 private:
  std::shared_ptr<Engine> e_;
  std::shared_ptr<Op> op_;
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(std::shared_ptr<Engine> e) : e_(std::move(e)) {}
  ~ShmTransport() override { e_->close(); }
  int rank() const override { return e_->rank(); }
  int size() const override { return e_->size(); }
  std::string name() const override { return "shm"; }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override {
    if (bytes == 0) return std::make_unique<DoneRequest>();
    return std::make_unique<ShmRequest>(e_, e_->post_send(data, bytes, peer, tag));
  }
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override {
    if (bytes == 0) return std::make_unique<DoneRequest>(peer);
    return std::make_unique<ShmRequest>(e_, e_->post_recv(data, bytes, peer, tag));
  }
  std::unique_ptr<Request> irecv_any(void*, size_t, uint32_t) override {
    throw std::runtime_error("ringzip: receive from any source is not supported by the shm transport");
  }
  void abort() override { e_->abort(); }
  void close() override { e_->close(); }

 private:
  std::shared_ptr<Engine> e_;
};

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

constexpr const char* kOutOfStep = "the ranks' setups on this store are out of step";

// Throws naming the rank; `what` says what failed.
[[noreturn]] void setup_error(int rank, int size, const std::string& what) {
  throw std::runtime_error("ringzip shm transport (rank " + std::to_string(rank) + " of " + std::to_string(size) +
                           "): setup failed: " + what);
}

void init_header(shm::Mapping& m, int rank, int size, size_t ring_bytes) {
  shm::SegmentHeader* h = m.header();
  h->version = shm::kVersion;
  h->rank = rank;
  h->size = size;
  h->pid = static_cast<int32_t>(getpid());
  h->start_time = shm::process_start_time(getpid());
  h->ring_bytes = ring_bytes;
  h->total_bytes = m.bytes();
  h->magic = shm::kMagic;  // a fresh tmpfs file is zero: atomics and ring counters start at 0
  std::atomic_thread_fence(std::memory_order_release);
}

void check_header(const shm::Mapping& m, int peer, int size, size_t ring_bytes, const std::string& name) {
  const shm::SegmentHeader* h = m.header();
  std::string bad;
  if (h->magic != shm::kMagic || h->version != shm::kVersion)
    bad = "is not a ringzip segment of this version";
  else if (h->rank != peer || h->size != size)
    bad = "belongs to rank " + std::to_string(h->rank) + " of " + std::to_string(h->size);
  else if (h->ring_bytes != ring_bytes)
    bad = "has rings of " + std::to_string(h->ring_bytes) + " bytes, this rank " + std::to_string(ring_bytes) +
          " (ring_bytes must agree on all ranks)";
  else if (h->total_bytes != m.bytes() || m.bytes() != shm::Layout{size, ring_bytes}.total())
    bad = "has the wrong size";
  if (!bad.empty()) throw std::runtime_error("segment " + name + " of rank " + std::to_string(peer) + " " + bad);
}

}  // namespace

size_t default_shm_ring_bytes(int size) {
  size_t ring = size_t(2) << 20;
  while (ring > (size_t(64) << 10) && ring * static_cast<size_t>(std::max(1, size - 1)) > (size_t(16) << 20)) ring /= 2;
  return ring;
}

std::unique_ptr<Transport> make_shm_transport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout) {
  return make_shm_transport(store, rank, size, timeout, ShmOptions{});
}

std::unique_ptr<Transport> make_shm_transport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout, const ShmOptions& options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("ringzip shm transport: rank " + std::to_string(rank) + " of size " +
                                std::to_string(size) + " is out of range");
  if (!store) throw std::invalid_argument("ringzip shm transport: no store");
  const size_t ring = options.ring_bytes ? options.ring_bytes : default_shm_ring_bytes(size);
  if (ring % 4096 || ring < (size_t(16) << 10))
    throw std::invalid_argument("ringzip shm transport: ring_bytes " + std::to_string(ring) +
                                " must be a multiple of 4096 and at least 16384");
  if (size == 1)
    return std::make_unique<ShmTransport>(
        std::make_shared<Engine>(0, 1, ring, shm::Mapping(), std::vector<shm::Mapping>(1)));
  shm::sweep_stale_segments();
  // Every construction on this store gets keys of its own, so a group may build its transport
  // again (after an abort) on the same prefix: ranks construct in the same order.
  const std::string gen = std::to_string(store->add("shm/generation/" + std::to_string(rank), 1));
  auto key = [&](const char* what, int r) { return "shm/" + gen + "/" + what + "/" + std::to_string(r); };

  const std::string name = shm::new_segment_name();
  shm::Mapping own;
  // The peers whose construction count on this store is not this rank's: a store that holds the
  // keys of an earlier job killed during setup (its ranks counted unequally), where the ranks
  // wait for each other under different keys. "" where all agree.
  auto out_of_step = [&](std::vector<std::string>* peer_gens) {
    std::string s;
    for (int p = 0; p < size; ++p) {
      const std::string g = p == rank ? gen : std::to_string(store->add("shm/generation/" + std::to_string(p), 0));
      if (peer_gens) peer_gens->push_back(g);
      if (g != gen) s += (s.empty() ? "" : ", ") + ("rank " + std::to_string(p) + " at " + g);
    }
    return s.empty() ? s
                     : std::string("; ") + kOutOfStep + " (this rank at " + gen + ", " + s +
                           "): the store holds keys of an earlier job, killed during its setup; start the job on "
                           "a fresh store (another MASTER_PORT or file)";
  };
  // A rank that cannot set up publishes why in place of its segment and mapped marks (also
  // under the keys of peers out of step), so the others fail at once instead of at the timeout
  // (the caller falls back to Gloo).
  auto give_up = [&](const char* what, std::string why) {
    try {
      std::vector<std::string> gens;
      const std::string note = out_of_step(&gens);
      if (why.find(kOutOfStep) == std::string::npos) why += note;  // not when a peer's message says it
      store->set(key(what, rank), bytes_of("!" + why));
      for (int p = 0; p < size; ++p)
        if (gens[p] != gen)
          for (const char* k : {"segment", "mapped"})
            store->set("shm/" + gens[p] + "/" + k + "/" + std::to_string(rank), bytes_of("!" + why));
    } catch (const std::exception&) {  // the store is gone too: the others time out
    }
    setup_error(rank, size, why);
  };
  auto value = [&](const char* what, int p) {
    const auto v = store->get(key(what, p));
    std::string s(v.begin(), v.end());
    if (!s.empty() && s[0] == '!')
      throw std::runtime_error("rank " + std::to_string(p) + " of this node: " + s.substr(1));
    return s;
  };
  try {
    own = shm::create_segment(name, shm::Layout{size, ring}.total());
  } catch (const std::exception& e) {
    give_up("segment", e.what());
  }
  bool linked = true;
  struct Unlink {  // the segment must not outlive a failed setup
    const std::string& name;
    bool& linked;
    ~Unlink() {
      if (linked) shm::unlink_segment(name);
    }
  } unlink{name, linked};
  init_header(own, rank, size, ring);

  std::vector<shm::Mapping> peers(size);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {  // the whole setup shares one timeout
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
  };
  bool mapped = false;
  try {
    store->set(key("segment", rank), bytes_of(name));
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      store->wait({key("segment", p)}, left());
      const std::string peer_name = value("segment", p);
      peers[p] = shm::open_segment(peer_name);
      std::atomic_thread_fence(std::memory_order_acquire);
      check_header(peers[p], p, size, ring, peer_name);
    }
    // Unlink only once every rank mapped every segment.
    store->set(key("mapped", rank), bytes_of("1"));
    mapped = true;
    for (int p = 0; p < size; ++p) {
      store->wait({key("mapped", p)}, left());
      value("mapped", p);
    }
  } catch (const std::exception& e) {
    shm::sweep_stale_segments();  // a peer that died during setup left its segment
    if (mapped) {
      std::string note;
      try {
        note = out_of_step(nullptr);
      } catch (const std::exception&) {  // the store is gone too
      }
      setup_error(rank, size, e.what() + note);
    }
    give_up("mapped", e.what());
  }
  shm::unlink_segment(name);
  linked = false;
  shm::RankNames names = options.names;
  if (names.group_size <= 0) names.group_size = size;
  return std::make_unique<ShmTransport>(
      std::make_shared<Engine>(rank, size, ring, std::move(own), std::move(peers), std::move(names)));
}

}  // namespace ringzip
