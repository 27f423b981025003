#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs a local deepool cluster on this machine's
# CPUs (a coordinator with its embedded SQLite state store and two workers with two CPU devices
# each), which trains a demo foreground burst-parallel job and a background job to completion.
# Extra arguments go to `deepool up` (see `build/bin/deepool up --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD_DIR=${DEEPOOL_BUILD_DIR:-build}
exec "$BUILD_DIR/bin/deepool" up "$@"
