#!/usr/bin/env bash
# Configures and builds deepool in ./build (Release). Extra arguments go to CMake's configure.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${DEEPOOL_BUILD_DIR:-build}
JOBS=${DEEPOOL_JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
