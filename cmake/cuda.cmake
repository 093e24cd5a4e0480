# CUDA part of the build; filled in with the GPU path.
