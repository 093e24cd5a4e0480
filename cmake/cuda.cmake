# CUDA part of the build (included when torch has CUDA and nvcc was found).
#
# Architectures: RINGZIP_CUDA_ARCHS (env or -D, e.g. "90" or "80;90") overrides; otherwise torch's
# own list restricted to >= 75, always with 90. Every arch gets SASS; the highest one gets PTX too
# so that newer GPUs can JIT it.
# NCCL: the nvidia-nccl package torch depends on (NCCL_DIR from torch_info.py): its nccl.h, and
# libnccl.so.2 linked by full path with an rpath into site-packages, so the process loads the
# same libnccl.so.2 torch does.
if(DEFINED ENV{RINGZIP_CUDA_ARCHS} AND NOT "$ENV{RINGZIP_CUDA_ARCHS}" STREQUAL "")
  set(RINGZIP_CUDA_ARCHS "$ENV{RINGZIP_CUDA_ARCHS}")
endif()
if(NOT RINGZIP_CUDA_ARCHS)
  string(REPLACE "," ";" _torch_arches "${TORCH_CUDA_ARCHES}")
  set(RINGZIP_CUDA_ARCHS 90)
  foreach(a IN LISTS _torch_arches)
    if(a MATCHES "^[0-9]+$" AND a GREATER_EQUAL 75)
      list(APPEND RINGZIP_CUDA_ARCHS ${a})
    endif()
  endforeach()
endif()
string(REPLACE "," ";" RINGZIP_CUDA_ARCHS "${RINGZIP_CUDA_ARCHS}")
list(REMOVE_DUPLICATES RINGZIP_CUDA_ARCHS)
list(SORT RINGZIP_CUDA_ARCHS COMPARE NATURAL)
list(GET RINGZIP_CUDA_ARCHS -1 _rz_top)
set(_rz_archs "")
foreach(a IN LISTS RINGZIP_CUDA_ARCHS)
  if(a STREQUAL _rz_top)
    list(APPEND _rz_archs "${a}")        # SASS + PTX
  else()
    list(APPEND _rz_archs "${a}-real")   # SASS only
  endif()
endforeach()
set(CMAKE_CUDA_ARCHITECTURES ${_rz_archs})
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "ringzip: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

if(NOT NCCL_DIR OR NOT EXISTS "${NCCL_DIR}/include/nccl.h")
  message(FATAL_ERROR "ringzip: CUDA build needs nccl.h from the nvidia-nccl package torch depends on "
                      "(not found: NCCL_DIR='${NCCL_DIR}'); set RINGZIP_CUDA=0 for a CPU-only build")
endif()
file(GLOB _rz_nccl_lib "${NCCL_DIR}/lib/libnccl.so*")
list(GET _rz_nccl_lib 0 _rz_nccl_lib)
message(STATUS "ringzip: NCCL ${NCCL_DIR} (${_rz_nccl_lib})")

file(GLOB_RECURSE RINGZIP_CUDA_SOURCES CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_SOURCE_DIR}/csrc/*.cu"
  "${CMAKE_CURRENT_SOURCE_DIR}/csrc/*_cuda.cc"
  "${CMAKE_CURRENT_SOURCE_DIR}/csrc/*/cuda_*.cc"
  "${CMAKE_CURRENT_SOURCE_DIR}/csrc/backend/cuda/*.cc"
  "${CMAKE_CURRENT_SOURCE_DIR}/csrc/transport/nccl/*.cc")
list(REMOVE_DUPLICATES RINGZIP_CUDA_SOURCES)
target_sources(_C PRIVATE ${RINGZIP_CUDA_SOURCES})
target_compile_definitions(_C PRIVATE RINGZIP_WITH_CUDA=1 USE_C10D_NCCL=1)
target_include_directories(_C PRIVATE "${NCCL_DIR}/include" ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(_C PRIVATE c10_cuda torch_cuda CUDA::cudart "${_rz_nccl_lib}")
# Codec kernels must give the CPU kernels' bytes: no FMA contraction, IEEE division and denormals.
target_compile_options(_C PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-fmad=false -ftz=false -prec-div=true -prec-sqrt=true
  --expt-relaxed-constexpr -Xcompiler=-fvisibility=hidden -Xcompiler=-fPIC -lineinfo>)
set_target_properties(_C PROPERTIES CUDA_SEPARABLE_COMPILATION OFF CUDA_ARCHITECTURES "${_rz_archs}"
  INSTALL_RPATH "$ORIGIN/../torch/lib;$ORIGIN/../nvidia/nccl/lib;$ORIGIN/../nvidia/cu13/lib"
  BUILD_RPATH "${TORCH_DIR}/lib;${NCCL_DIR}/lib")
