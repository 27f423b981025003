#!/usr/bin/env bash
# Installs every build and test dependency of deepool: Debian 12 packages, then PyTorch's
# libtorch (CUDA build) and torchvision from PyPI into .venv (scripts/install-torch.sh).
# Idempotent: what is already present is left as it is. Run as root (or with sudo).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # services: gRPC, its C++ code generator, protobuf
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # runtime: libtorch comes from PyPI (install-torch.sh); its wheel ships no Gloo headers,
  # which c10d's ProcessGroupGloo.hpp includes
  libgloo-dev
  # command line, JSON, logging, state store
  libcli11-dev nlohmann-json3-dev libspdlog-dev libsqlite3-dev sqlite3
  # the PostgreSQL store's client library, and a server the tests start themselves
  libpq-dev postgresql
  # image data sets: JPEG (libjpeg-turbo) and PNG decoding
  libjpeg62-turbo-dev libpng-dev
  # tests and benchmarks (prometheus: promtool checks /metrics, and a test scrapes a cluster)
  catch2 libbenchmark-dev prometheus
  # fuzzing (scripts/fuzz.sh: clang, libFuzzer) and linting (scripts/clang-tidy.sh)
  clang libclang-rt-14-dev clang-tidy
  # the virtual environment that holds torch and torchvision
  python3 python3-venv
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

install_torch() { bash "$(dirname "${BASH_SOURCE[0]}")/install-torch.sh"; }

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  install_torch
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
install_torch
