# Finds the one libtorch deepool builds against: PyTorch's torch wheel in the project's virtual
# environment (.venv, made by scripts/install-torch.sh at the version in requirements/torch.txt).
#
# Sets DEEPOOL_HAVE_CUDA (ON when that libtorch has CUDA, i.e. always with the pinned wheel, as
# long as the CUDA toolkit's headers are found) and, with CUDA, the imported target
# deepool::nccl: the NCCL of the wheel's own nvidia-nccl package, whose header must be exactly
# the NCCL version torch was built with (ProcessGroupNCCL::Options embeds ncclConfig_t, whose
# layout changes between NCCL releases). A mismatch stops the configure step.
set(DEEPOOL_HAVE_CUDA OFF)
if(NOT DEEPOOL_WITH_RUNTIME)
  return()
endif()

set(DEEPOOL_TORCH_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python"
    CACHE FILEPATH "Python of the virtual environment that holds the torch wheel")
if(NOT EXISTS "${DEEPOOL_TORCH_PYTHON}")
  message(FATAL_ERROR
    "deepool: no ${DEEPOOL_TORCH_PYTHON}. Run scripts/install-deps.sh (or scripts/install-torch.sh), "
    "which installs the pinned torch wheel into .venv, or pass -DDEEPOOL_TORCH_PYTHON=/path/to/python "
    "of an environment that has it.")
endif()

# One call asks the environment for everything: torch's CMake prefix, its version, the NCCL
# version its metadata pins, and where the installed nvidia-nccl package lives.
execute_process(
  COMMAND "${DEEPOOL_TORCH_PYTHON}" -c [=[
import importlib.metadata as md, os, re, sys
import torch.utils
print(torch.utils.cmake_prefix_path)
print(md.version("torch"))
pinned, package = "", ""
for requirement in md.requires("torch") or []:
    match = re.match(r"(nvidia-nccl-cu\d+)\s*==\s*([0-9.]+)", requirement)
    if match:
        package, pinned = match.group(1), match.group(2)
print(pinned)
nccl_dir = ""
if package:
    try:
        import nvidia.nccl
        nccl_dir = list(nvidia.nccl.__path__)[0]
    except ImportError:
        pass
print(nccl_dir)
]=]
  OUTPUT_VARIABLE torch_probe
  ERROR_VARIABLE torch_probe_error
  RESULT_VARIABLE torch_probe_result
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT torch_probe_result EQUAL 0)
  message(FATAL_ERROR "deepool: ${DEEPOOL_TORCH_PYTHON} cannot import torch: ${torch_probe_error}")
endif()
string(REPLACE "\n" ";" torch_probe "${torch_probe}")
list(GET torch_probe 0 torch_prefix)
list(GET torch_probe 1 DEEPOOL_TORCH_VERSION)
list(GET torch_probe 2 torch_nccl_pinned)
list(GET torch_probe 3 torch_nccl_dir)
if(DEEPOOL_TORCH_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "deepool: needs libtorch 2.x, found torch ${DEEPOOL_TORCH_VERSION}")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${torch_prefix}")

# The CUDA build of torch needs the CUDA toolkit's headers (for cuda_runtime_api.h) at build
# time; its libraries come with the wheel.
if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(Torch REQUIRED)
if(TORCH_CXX_FLAGS)
  set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${TORCH_CXX_FLAGS}")
endif()
if(TARGET torch_cuda)
  set(DEEPOOL_HAVE_CUDA ON)
endif()

if(DEEPOOL_HAVE_CUDA)
  set(nccl_header "${torch_nccl_dir}/include/nccl.h")
  file(GLOB nccl_library "${torch_nccl_dir}/lib/libnccl.so*")
  if(NOT torch_nccl_pinned OR NOT EXISTS "${nccl_header}" OR NOT nccl_library)
    message(FATAL_ERROR
      "deepool: torch ${DEEPOOL_TORCH_VERSION} has CUDA but its NCCL package is missing "
      "(pinned: '${torch_nccl_pinned}', found in: '${torch_nccl_dir}'). Reinstall with "
      "scripts/install-torch.sh.")
  endif()
  list(GET nccl_library 0 nccl_library)
  file(STRINGS "${nccl_header}" nccl_defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  set(nccl_header_version "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part} ([0-9]+)" unused "${nccl_defines}")
    list(APPEND nccl_header_version "${CMAKE_MATCH_1}")
  endforeach()
  string(REPLACE ";" "." nccl_header_version "${nccl_header_version}")
  if(NOT nccl_header_version VERSION_EQUAL torch_nccl_pinned)
    message(FATAL_ERROR
      "deepool: NCCL header ${nccl_header} is version ${nccl_header_version}, but torch "
      "${DEEPOOL_TORCH_VERSION} was built with NCCL ${torch_nccl_pinned}. ProcessGroupNCCL's "
      "options embed ncclConfig_t, whose layout changes between NCCL releases: install the "
      "nvidia-nccl package torch pins (scripts/install-torch.sh).")
  endif()
  add_library(deepool::nccl SHARED IMPORTED)
  set_target_properties(deepool::nccl PROPERTIES
    IMPORTED_LOCATION "${nccl_library}"
    INTERFACE_INCLUDE_DIRECTORIES "${torch_nccl_dir}/include")
  string(REPLACE "." ";" nccl_parts "${nccl_header_version}")
  list(GET nccl_parts 0 DEEPOOL_NCCL_MAJOR)
  list(GET nccl_parts 1 DEEPOOL_NCCL_MINOR)
  list(GET nccl_parts 2 DEEPOOL_NCCL_PATCH)
endif()
message(STATUS "deepool: libtorch ${DEEPOOL_TORCH_VERSION} from ${torch_prefix}, "
               "CUDA: ${DEEPOOL_HAVE_CUDA}, NCCL: ${nccl_header_version}")

# torch's wheel bundles its own (newer) fmt headers; spdlog, as Debian builds it, is compiled
# against Debian's fmt. A directory that holds only Debian's fmt, searched before torch's
# include directory, keeps every translation unit on the fmt that libspdlog and libfmt were
# built with.
find_package(fmt REQUIRED)
get_target_property(fmt_include_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
find_path(DEEPOOL_SYSTEM_FMT_INCLUDE fmt/format.h PATHS ${fmt_include_dirs} NO_DEFAULT_PATH)
if(NOT DEEPOOL_SYSTEM_FMT_INCLUDE)
  find_path(DEEPOOL_SYSTEM_FMT_INCLUDE fmt/format.h REQUIRED)
endif()
set(DEEPOOL_FMT_SHIM "${PROJECT_BINARY_DIR}/system-fmt")
file(MAKE_DIRECTORY "${DEEPOOL_FMT_SHIM}")
file(CREATE_LINK "${DEEPOOL_SYSTEM_FMT_INCLUDE}/fmt" "${DEEPOOL_FMT_SHIM}/fmt" SYMBOLIC)
