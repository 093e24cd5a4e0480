#pragma once
// How the log-step all-reduces (rd.cc, hd.cc) run on a number of ranks that is not a power of
// two: ranks beyond the largest power of two p fold their buffer into rank - p in step 0 and
// receive the result in the schedule's last step, so the p others run the power-of-two
// algorithm in between. Ranks below n - p receive the folded buffer in step 1, reduce it as
// op(own, folded) (the folded rank is the higher one) and send the result in the step before the
// last.
#include <vector>

#include "collective/schedule.h"

namespace ringzip {

struct Fold {
  int r, p = 1, K = 0, extra;
  Buf data;
  void* scratch;  // where the folded buffer lands (data's size)
  int last = 0;   // the schedule's last step: set once the schedule's length is known

  Fold(const Comm& c, Buf d, void* s) : r(c.rank()), data(d), scratch(s) {
    for (; p * 2 <= c.size(); p *= 2) ++K;
    extra = c.size() - p;
  }
  uint32_t result_tag() const { return static_cast<uint32_t>(last - 1); }

  void recvs(int s, std::vector<Xfer>& q) const {
    if (s == 1 && r < extra) q.push_back({scratch, data.bytes(), r + p, 0, "fold receive from"});
    if (s == last && r >= p) q.push_back({data.data, data.bytes(), r - p, result_tag(), "result receive from"});
  }
  // The whole body of a rank >= p (returns false on the others).
  bool folded_body(int s, Step& st) const {
    if (r < p) return false;
    if (s == 0) st.send(data.data, data.bytes(), r - p, 0, "fold send to");
    if (s == 1) st.sends_done();  // data is free to take the result
    if (s == last) st.wait(0);
    return true;
  }
  // In step last - 1, once the result is complete.
  void send_result(Step& st) const {
    if (r < extra) st.send(data.data, data.bytes(), r + p, result_tag(), "result send to");
  }
};

}  // namespace ringzip
