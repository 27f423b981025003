#!/usr/bin/env bash
# Installs every build and test dependency of deepool from Debian 12 packages.
# Idempotent: packages already present are left as they are. Run as root (or with sudo).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # services: gRPC, its C++ code generator, protobuf
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # runtime: libtorch (CPU, with c10d, Gloo and TCPStore headers)
  libtorch-dev libgloo-dev  # Gloo headers for c10d::ProcessGroupGloo
  # command line, JSON, logging, state store
  libcli11-dev nlohmann-json3-dev libspdlog-dev libsqlite3-dev sqlite3
  # tests and benchmarks
  catch2 libbenchmark-dev
  # checkpoint compatibility tests load checkpoints into torchvision models
  python3 python3-torch python3-torchvision
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
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
