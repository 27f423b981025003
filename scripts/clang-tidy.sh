#!/usr/bin/env bash
# Runs clang-tidy (checks in .clang-tidy) over deepool's sources, with the compile commands of a
# configured build directory (CMAKE_EXPORT_COMPILE_COMMANDS is on in CMakeLists.txt).
#
#   scripts/clang-tidy.sh [build-dir] [file-regex]    (default build dir: $DEEPOOL_BUILD_DIR or build)
#
# Covers the code without libtorch: common/, planner/ (and zoo/), protocol/, jobspec/,
# coordinator/, cli/ (and services/) and worker/daemon/, plus the deepool headers they include.
# The libtorch runtime (worker/runtime/, worker/bin/) and its tests are left out: every such
# translation unit parses all of <torch/torch.h> (GCC's precompiled header is of no use to
# clang), about a minute each, which makes a run take most of an hour. Pass a file regex (e.g. 'worker/runtime/') to
# lint those on purpose. Exits non-zero when any check fires (WarningsAsErrors in .clang-tidy).
# Not run in CI; needs Debian's clang-tidy package (clang-tidy, run-clang-tidy).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${1:-${DEEPOOL_BUILD_DIR:-build}}
FILES=${2:-"^${ROOT}/(common|planner|protocol|jobspec|coordinator|cli|worker/daemon)/.*\.cc$"}
JOBS=${DEEPOOL_JOBS:-$(nproc)}
if [[ ! -f "$BUILD_DIR/compile_commands.json" ]]; then
  echo "clang-tidy.sh: no $BUILD_DIR/compile_commands.json; configure first (scripts/build.sh)" >&2
  exit 2
fi
# The generated protobuf/gRPC headers must exist before the coordinator's sources can be parsed.
if cmake --build "$BUILD_DIR" --target help | grep -q '^deepool_proto:'; then
  cmake --build "$BUILD_DIR" --target deepool_proto
fi
# GCC-only warning flags in the compile commands are unknown to clang; -Werror (CI) would turn
# clang's own compiler warnings into errors, which are not what this script checks.
exec run-clang-tidy -p "$BUILD_DIR" -j "$JOBS" -quiet \
  -extra-arg=-Wno-unknown-warning-option -extra-arg=-Wno-error "$FILES"
