// The dense all-reduce by algorithm. Which algorithm
// runs is the planner's decision (plan/plan.h): this layer runs the one it is handed.

#include "collective/algorithms.h"
#include "collective/compressed.h"
#include "common/check.h"

namespace ringzip {

void allreduce(Comm& c, Buf data, RedOp op, AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::Ring: return ring_allreduce(c, data, op);
    case AllreduceAlgo::RecursiveDoubling: return rd_allreduce(c, data, op);
    case AllreduceAlgo::Direct: return direct_allreduce(c, data, op);
    case AllreduceAlgo::Star: return star_allreduce(c, data, op);
    case AllreduceAlgo::HalvingDoubling: return hd_allreduce(c, data, op);
    case AllreduceAlgo::Tree: return tree_allreduce(c, data, op);
    case AllreduceAlgo::Sra: return sra_allreduce(c, data, op);
    case AllreduceAlgo::Auto: break;
  }
  RZ_CHECK(false, "allreduce: no algorithm chosen (the planner settles \"auto\" before a call runs)");
}

}  // namespace ringzip
