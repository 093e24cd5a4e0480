#pragma once
// Three stages over m chunks -- inside(i) (the intra-node reduce-scatter of chunk i), between(i)
// (its inter-node step) and gather(i) (its intra-node all-gather) -- with between(i) after
// inside(i) and gather(i) after between(i). Threaded, the intra-node stages run on a second
// thread, so that chunk i crosses the slow link while the node works on its neighbours; the
// same stages run on the same data either way, so the bits do not depend on it. Each thread
// keeps its stages in one order on every rank (inside 0..m-1 then gather 0..m-1; between
// 0..m-1), which is what keeps the ranks' schedules matched. A failure on either thread stops
// the other (its transport was aborted by Comm::fail, or it is woken here) and is rethrown.
// Each hand-off is told to the transport (Transport::mark: chunk i's inside stage done is point
// 2i, its between stage 2i + 1), so that a recorded run replays in the same order.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/transport.h"

namespace ringzip {

template <typename Inside, typename Between, typename Gather>
void run_pipeline(Transport& net, int m, bool threaded, Inside inside, Between between, Gather gather) {
  if (!threaded || m == 1) {
    for (int i = 0; i < m; ++i) {
      inside(i);
      between(i);
      gather(i);
    }
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  int inside_done = 0, between_done = 0;
  std::exception_ptr err;
  auto await = [&](const int& counter, int i) {
    net.mark(2 * static_cast<int64_t>(i) + (&counter == &between_done), false);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return counter > i || err; });
    if (err) throw std::runtime_error("stopped: the other stage of the pipeline failed");
  };
  auto advance = [&](int& counter) {
    net.mark(2 * static_cast<int64_t>(counter) + (&counter == &between_done), true);
    std::lock_guard<std::mutex> lock(mu);
    ++counter;
    cv.notify_all();
  };
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!err) err = e;
    cv.notify_all();
  };
  std::thread node([&] {
    try {
      for (int i = 0; i < m; ++i) {
        inside(i);
        advance(inside_done);
      }
      for (int i = 0; i < m; ++i) {
        await(between_done, i);
        gather(i);
      }
    } catch (...) {
      fail(std::current_exception());
    }
  });
  try {
    for (int i = 0; i < m; ++i) {
      await(inside_done, i);
      between(i);
      advance(between_done);
    }
  } catch (...) {
    fail(std::current_exception());
  }
  node.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace ringzip
