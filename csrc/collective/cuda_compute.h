#pragma once
// Compute on CUDA device memory: every operation is queued on one stream (no host sync);
// scratch comes from torch's caching allocator on that stream, so it is stream-safe to drop.
#include <c10/cuda/CUDAStream.h>

#include "collective/compute.h"

namespace ringzip {

std::unique_ptr<Compute> make_cuda_compute(c10::cuda::CUDAStream stream);

}  // namespace ringzip
