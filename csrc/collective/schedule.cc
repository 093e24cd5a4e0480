// The executor of schedules (schedule.h): one loop over the steps, posting as the transport
// allows -- eagerly with receives `lookahead` steps ahead, or one group per step.
#include "collective/schedule.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>

namespace ringzip {

class Executor {
 public:
  Executor(Comm& c, const Schedule& s)
      : c_(c),
        sch_(s),
        window_(lookahead(c, s.ahead)),
        grouped_(c.net.lookahead() <= 0),
        recvs_(s.steps),
        reqs_(s.steps) {}

  void run() {
    TORCH_INTERNAL_ASSERT(sch_.lag == 1 || !grouped_, "ringzip: a grouped executor runs schedules of lag 1 only");
    for (int s = 0; s < sch_.steps; ++s) {
      if (grouped_) {
        post_group(s);
      } else {
        while (posted_ < sch_.steps && posted_ - s <= window_) post_recvs(posted_++);
      }
      earlier_sends_ = sends_.size();  // grouped: the body's own sends are pending, not posted
      Step step(*this, s);
      if (sch_.body) sch_.body(s, step);
    }
    TORCH_INTERNAL_ASSERT(pending_.empty(), "ringzip: the last step of a schedule made sends nobody receives");
    // A receive the bodies never waited for must still land before its buffer goes away.
    for (int s = 0; s < sch_.steps; ++s)
      for (size_t i = 0; i < reqs_[s].size(); ++i) wait(s, s, i);
    wait_sends(sends_.size());
  }

  void wait(int current, int s, size_t i) {
    TORCH_INTERNAL_ASSERT(s >= 0 && s <= current && i < reqs_[s].size(), "ringzip: step ", current,
                          " waits for receive ", i, " of step ", s, ", which it does not have");
    auto& q = reqs_[s][i];
    if (!q) return;  // waited already
    c_.wait(*q, recvs_[s][i].peer, recvs_[s][i].what);
    q.reset();
  }

  void send(const Xfer& x) {
    if (grouped_)
      pending_.push_back(x);
    else
      post_send(x);
  }

  void sends_done() { wait_sends(earlier_sends_); }

  void receive_next(int s) {
    if (!grouped_ && posted_ == s + 1 && posted_ < sch_.steps) post_recvs(posted_++);
  }

 private:
  void post_send(const Xfer& x) {
    sends_.push_back(c_.isend(x.data, x.bytes, x.peer, x.step));
    send_info_.push_back(x);
  }

  void post_recvs(int s) {
    if (sch_.recvs) sch_.recvs(s, recvs_[s]);
    for (const auto& x : recvs_[s]) reqs_[s].push_back(c_.irecv(x.data, x.bytes, x.peer, x.step));
  }

  // Step s's group: the sends body s-1 made and the receives of step s. Transfers between two
  // ranks match in posting order there, so both sides post in tag-step order (stable: transfers
  // with equal steps keep the order the schedule gave them, which is the same on both sides).
  void post_group(int s) {
    if (sch_.recvs) sch_.recvs(s, recvs_[s]);
    auto& rx = recvs_[s];
    if (pending_.empty() && rx.empty()) return;
    auto by_step = [](const Xfer& a, const Xfer& b) { return a.step < b.step; };
    std::stable_sort(pending_.begin(), pending_.end(), by_step);
    std::vector<size_t> order(rx.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return by_step(rx[a], rx[b]); });
    reqs_[s].resize(rx.size());
    c_.net.group_start();
    try {
      for (const auto& x : pending_) post_send(x);
      for (size_t i : order) reqs_[s][i] = c_.irecv(rx[i].data, rx[i].bytes, rx[i].peer, rx[i].step);
    } catch (...) {
      try {
        c_.net.group_end();
      } catch (...) {}
      throw;
    }
    c_.net.group_end();
    pending_.clear();
  }

  void wait_sends(size_t upto) {
    for (; sends_waited_ < upto; ++sends_waited_) {
      c_.wait(*sends_[sends_waited_], send_info_[sends_waited_].peer, send_info_[sends_waited_].what);
      sends_[sends_waited_].reset();
    }
  }

  Comm& c_;
  const Schedule& sch_;
  const int window_;
  const bool grouped_;
  std::vector<std::vector<Xfer>> recvs_;
  std::vector<std::vector<std::unique_ptr<Request>>> reqs_;
  int posted_ = 0;             // eager: steps whose receives are posted
  std::vector<Xfer> pending_;  // grouped: sends made by the current body
  std::vector<std::unique_ptr<Request>> sends_;
  std::vector<Xfer> send_info_;
  size_t sends_waited_ = 0, earlier_sends_ = 0;
};

void Step::wait(int step, size_t i) { x_.wait(s_, step, i); }

void Step::send(const void* data, size_t bytes, int peer, uint32_t step, const char* what) {
  x_.send(Xfer{const_cast<void*>(data), bytes, peer, step, what});
}

void Step::sends_done() { x_.sends_done(); }

void Step::receive_next() { x_.receive_next(s_); }

int lookahead(const Comm& c, int cap) { return std::max(0, std::min(cap, c.net.lookahead())); }

void run(Comm& c, const Schedule& schedule) { Executor(c, schedule).run(); }

void run_exchange(Comm& c, const std::vector<Xfer>& sends, const std::vector<Xfer>& recvs) {
  Schedule s;
  s.steps = 2;
  s.recvs = [&](int step, std::vector<Xfer>& q) {
    if (step == 1) q = recvs;
  };
  s.body = [&](int step, Step& st) {
    if (step == 0)
      for (const auto& x : sends) st.send(x.data, x.bytes, x.peer, x.step, x.what);
    else
      for (size_t i = 0; i < recvs.size(); ++i) st.wait(i);
  };
  run(c, s);
}

}  // namespace ringzip
