#include "transport/tcp/tcp_transport.h"

#include <atomic>
#include <cmath>
#include <stdexcept>

#include "plan/options.h"
#include "transport/tcp/connect.h"
#include "transport/tcp/engine.h"

namespace ringzip {
namespace {

using tcp::Engine;
using tcp::Op;

// What one peer's connections carry together on a paced link of `bits_per_s` (bytes/s; 0 where
// the rate is not known): the streams of every peer converge on each machine's link.
double pair_rate(double bits_per_s, int size) {
  return bits_per_s > 0 && std::isfinite(bits_per_s) && size > 1 ? kPaceShare * bits_per_s / 8 / (size - 1) : 0;
}

class TcpRequest final : public Request {
 public:
  TcpRequest(std::shared_ptr<Engine> e, std::shared_ptr<Op> op) : e_(std::move(e)), op_(std::move(op)) {}
  ~TcpRequest() override { e_->drop(*op_); }  // no-op once finished
  void wait(std::chrono::milliseconds timeout) override { e_->wait(*op_, timeout); }
  int source() const override { return op_->send ? -1 : op_->peer; }

 private:
  std::shared_ptr<Engine> e_;
  std::shared_ptr<Op> op_;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(std::shared_ptr<Engine> e, double window) : e_(std::move(e)), window_(window) {}
  ~TcpTransport() override { e_->close(); }
  int rank() const override { return e_->rank(); }
  int size() const override { return e_->size(); }
  std::string name() const override { return "tcp"; }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override {
    if (bytes == 0) return std::make_unique<DoneRequest>();
    return std::make_unique<TcpRequest>(e_, e_->post_send(data, bytes, peer, tag));
  }
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override {
    if (bytes == 0) return std::make_unique<DoneRequest>(peer);
    return std::make_unique<TcpRequest>(e_, e_->post_recv(data, bytes, peer, tag));
  }
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override {
    if (bytes == 0) throw std::invalid_argument("ringzip: a receive from any source needs at least one byte");
    return std::make_unique<TcpRequest>(e_, e_->post_recv_any(data, bytes, tag));
  }
  void abort() override { e_->abort("a collective failed"); }
  void close() override { e_->close(); }
  double round_trip() const override { return e_->round_trip(); }
  int connections(int peer) const override { return static_cast<int>(e_->pool(peer)); }
  void pace(double bits_per_s) override {
    rate_ = pair_rate(bits_per_s, size());
    e_->pace(rate_);
  }
  double peer_rate() const override { return rate_; }
  // Paced (pace()), a long link's new connections open their windows in the background
  // (Engine::warm): a round trip of the pair's share of the link each.
  void warm() { warmed_ = e_->warm(rate_, window_); }
  int warmed() const override { return warmed_; }
  double window_bytes() const override {
    double least = 0;
    for (int p = 0; p < size(); ++p)
      if (p != rank() && (least == 0 || e_->pool(p) * window_ < least)) least = e_->pool(p) * window_;
    return least;
  }

 private:
  std::shared_ptr<Engine> e_;
  double window_;  // one connection's (tcp::Connected::window_bytes)
  std::atomic<double> rate_{0};  // one peer's connections together, bytes/s (pace); 0: unpaced
  int warmed_ = 0;  // connections warm() warmed
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout, const TcpOptions& options) {
  if (options.connections < 0) throw std::invalid_argument("ringzip: the tcp transport's connections must be 0 (auto) or more");
  tcp::Meeting meeting{
      [&](const std::string& address) { store->set("addr/" + std::to_string(rank), std::vector<uint8_t>(address.begin(), address.end())); },
      [&](int peer) {
        const auto v = store->get("addr/" + std::to_string(peer));
        return std::string(v.begin(), v.end());
      }};
  auto c = tcp::connect_all(rank, size, options.connections, pair_rate(options.link_gbit * 1e9, size), options.address,
                            meeting, timeout);
  auto t = std::make_unique<TcpTransport>(std::make_shared<Engine>(rank, size, std::move(c.sockets), std::move(c.processes)),
                                          c.window_bytes);
  if (options.link_gbit > 0) {  // the link's rate given: paced from the first byte (configure paces it again)
    t->pace(options.link_gbit * 1e9);
    t->warm();
  }
  return t;
}

}  // namespace ringzip
