#!/usr/bin/env bash
# Configures and builds deepool in ./build (Release). Extra arguments go to CMake's configure.
# Both README commands (scripts/up.sh and scripts/test.sh) build through here with the same
# configuration, warnings as errors included, so the second reuses everything the first built.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${DEEPOOL_BUILD_DIR:-build}
JOBS=${DEEPOOL_JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DDEEPOOL_WERROR=ON "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
