#!/usr/bin/env bash
# Packs, on a machine with network, what a GPU node without network may lack to build deepool's
# GPU targets, into one archive that travels with the working tree: gpu-node-pack/gpu-node-deps.tar.gz
# (ignored by git; carry the folder gpu-node-pack). scripts/gpu-node-test.sh finds it there,
# unpacks the groups the node lacks into a prefix and builds against them and the node's torch
# (docs/results/gpu-node.md, "How a node is built").
#
# Usage: scripts/pack-gpu-node.sh [--out DIR]
#   --out DIR   where the archive goes (default gpu-node-pack)
#
# What is packed, and why only this: the GPU targets are configured with
# DEEPOOL_WITH_SERVICES=OFF, so gRPC, protobuf, abseil, OpenSSL, SQLite and libpq are not needed
# there; torch, CUDA and NCCL are the node's own (its python3's torch wheel); the compiler, CMake
# and Ninja come with the node's image. What remains are Debian 12 (amd64) packages, in groups,
# each with the header whose presence on the node means it has that group already:
#   fmt, spdlog       logging (spdlog is compiled against Debian's fmt; both or neither)
#   nlohmann_json     JSON
#   CLI11             command lines
#   Catch2 v2         the tests
#   gloo              headers only: torch's ProcessGroupGloo.hpp includes them, the wheel has none
#   libjpeg-turbo     image_folder decoding (worker/runtime/data/images)
#   libpng, zlib      the same, PNG
# The archive holds the .deb files (unpacked on the node with dpkg-deb, or ar and tar), groups.tsv
# (group, probe header, .deb files) and packed-from.txt (date, host, package versions).
# Needs apt-get (Debian 12 or a system with Debian 12's sources) and dpkg-deb; not root.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/gpu-node-pack"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "pack-gpu-node: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

# group <TAB> probe (a header under the node's usr/include or usr/local/include) <TAB> packages
groups_table="$(cat <<'EOF'
fmt	fmt/format.h	libfmt-dev libfmt9
spdlog	spdlog/spdlog.h	libspdlog-dev libspdlog1.10
nlohmann_json	nlohmann/json.hpp	nlohmann-json3-dev
cli11	CLI/CLI.hpp	libcli11-dev
catch2	catch2/catch.hpp	catch2
gloo	gloo/algorithm.h	libgloo-dev
jpeg	jpeglib.h	libjpeg62-turbo-dev libjpeg62-turbo
zlib	zlib.h	zlib1g-dev zlib1g
png	png.h	libpng-dev libpng16-16
EOF
)"

for tool in apt-get dpkg-deb tar; do
  command -v "$tool" >/dev/null || { echo "pack-gpu-node: needs $tool" >&2; exit 1; }
done
if [[ "$(dpkg --print-architecture 2>/dev/null)" != amd64 ]]; then
  echo "pack-gpu-node: the GPU nodes are x86-64; run this on an amd64 Debian" >&2
  exit 1
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/debs"
# apt-get download as root hands the files to the _apt user unless told not to.
sandbox=()
if [[ "$(id -u)" -eq 0 ]]; then sandbox=(-o APT::Sandbox::User=root); fi
mapfile -t packages < <(cut -f3 <<<"$groups_table" | tr ' ' '\n' | sort -u)
if ! (cd "$stage/debs" && apt-get "${sandbox[@]}" download -qq "${packages[@]}"); then
  echo "pack-gpu-node: apt-get download failed (no network, or stale lists: apt-get update)" >&2
  exit 1
fi

{
  printf '# group\tprobe header\t.deb files\n'
  while IFS=$'\t' read -r group probe names; do
    files=()
    for name in $names; do
      matches=("$stage"/debs/"${name}"_*.deb)
      [[ -e "${matches[0]}" ]] || { echo "pack-gpu-node: $name was not downloaded" >&2; exit 1; }
      files+=("$(basename "${matches[0]}")")
    done
    printf '%s\t%s\t%s\n' "$group" "$probe" "${files[*]}"
  done <<<"$groups_table"
} > "$stage/groups.tsv"
{
  echo "packed $(date -u '+%F %H:%M UTC') on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "from $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'no git')"
  for deb in "$stage"/debs/*.deb; do
    echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
  done
} > "$stage/packed-from.txt"

mkdir -p "$out"
archive="$out/gpu-node-deps.tar.gz"
tar -C "$stage" -czf "$archive.tmp" groups.tsv packed-from.txt debs
mv "$archive.tmp" "$archive"
size="$(stat -c %s "$archive")"
echo "pack-gpu-node: wrote $archive ($((size / 1024)) KiB, ${#packages[@]} packages);" \
     "carry the folder $(realpath --relative-to="$root" "$out") to the node (64 MiB with the tree)"
