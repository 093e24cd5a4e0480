// The dense all-reduce by algorithm, and the names of the compressed algorithms. Which algorithm
// runs is the planner's decision (plan/plan.h): this layer runs the one it is handed.
#include <stdexcept>

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
    case AllreduceAlgo::Auto: break;
  }
  RZ_CHECK(false, "allreduce: no algorithm chosen (the planner settles \"auto\" before a call runs)");
}

CompressedAlgo parse_compressed_algo(const std::string& s) {
  if (s == "auto") return CompressedAlgo::Auto;
  if (s == "ring") return CompressedAlgo::Ring;
  if (s == "sra") return CompressedAlgo::Sra;
  if (s == "sparse") return CompressedAlgo::Sparse;
  throw std::invalid_argument("unknown compressed algorithm '" + s + "' (expected auto, ring, sra or sparse)");
}

const char* compressed_algo_name(CompressedAlgo a) {
  switch (a) {
    case CompressedAlgo::Auto: return "auto";
    case CompressedAlgo::Ring: return "ring";
    case CompressedAlgo::Sra: return "sra";
    case CompressedAlgo::Sparse: return "sparse";
  }
  return "?";
}

}  // namespace ringzip
