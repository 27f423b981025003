# Finds libtorch for the runtime and detects whether it was built with CUDA.
# CUDA is never required: DEEPOOL_HAVE_CUDA is ON only when the Torch package found has it.
set(DEEPOOL_HAVE_CUDA OFF)
if(DEEPOOL_WITH_RUNTIME)
  find_package(Torch REQUIRED)
  # Debian's libtorch exports c10d/Gloo headers alongside torch; the pip wheel does too.
  if(TORCH_CXX_FLAGS)
    set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${TORCH_CXX_FLAGS}")
  endif()
  if(TARGET torch_cuda OR TARGET c10_cuda OR CAFFE2_USE_CUDA OR USE_CUDA)
    set(DEEPOOL_HAVE_CUDA ON)
  endif()
  message(STATUS "deepool: libtorch ${Torch_VERSION}, CUDA support: ${DEEPOOL_HAVE_CUDA}")
endif()
