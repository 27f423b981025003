# shellcheck shell=bash disable=SC2034  # the gpu_node_* variables are read by the sourcing script
# Sourced by scripts/gpu-node-test.sh (not run on its own): what a GPU node needs before its
# first GPU test. Names which tree it holds, picks the torch to build against, supplies the
# build's dependencies from the node or from the pack that scripts/pack-gpu-node.sh made, then
# configures and builds the GPU targets. Each function prints what it decided to stdout (for the
# log) and sets the gpu_node_* variables the report reads; a missing piece is an error that
# names it (return 1), never a half-configured build.

# The tree this copy holds. A node is sent a working tree with a copy of .git that may be stale
# (it was, in every session up to 2026-11-28), so HEAD alone does not name it. The tree hash is
# that of every file git would add here (tracked and untracked, not ignored), hashed into a
# temporary index and object folder: the repository is not written to. On the sending machine
# `scripts/gpu-node-test.sh --source-identity` prints the same hash for the same files, and
# `git log --format='%h %T' | grep TREE` finds the commit whose tree it is.
# Sets gpu_node_head, gpu_node_tree, gpu_node_changed (files differing from HEAD's tree).
gpu_node_source_identity() {
  local scratch objects status=0
  scratch="$(mktemp -d)"
  mkdir -p "$scratch/objects"
  gpu_node_head="unknown" gpu_node_tree="unknown" gpu_node_changed="unknown"
  (
    # The repository's own objects are read (HEAD's tree), the new ones go to the scratch folder.
    if objects="$(git rev-parse --path-format=absolute --git-path objects 2>/dev/null)"; then
      export GIT_ALTERNATE_OBJECT_DIRECTORIES="$objects"
    else  # no .git at all: a scratch repository that reads this tree's .gitignore
      export GIT_DIR="$scratch/git" GIT_WORK_TREE="$PWD"
      git init -q
    fi
    export GIT_INDEX_FILE="$scratch/index" GIT_OBJECT_DIRECTORY="$scratch/objects"
    git add -A . && git write-tree > "$scratch/tree" || exit 1
    if git rev-parse -q --verify HEAD > "$scratch/head"; then
      git diff-index --cached --name-only HEAD | wc -l > "$scratch/changed"
    fi
  ) >/dev/null 2>&1 || status=1
  [[ -s "$scratch/tree" ]] && gpu_node_tree="$(cat "$scratch/tree")"
  [[ -s "$scratch/head" ]] && gpu_node_head="$(cat "$scratch/head")"
  [[ -s "$scratch/changed" ]] && gpu_node_changed="$(tr -d ' ' < "$scratch/changed")"
  rm -rf "$scratch"
  return $status
}

# The torch to build against: DEEPOOL_TORCH_PYTHON if set; else the project's .venv (the pinned
# wheel, requirements/torch.txt) if it imports torch; else the node's own python3 (a node
# without network cannot install the pinned wheel, several GB). Sets gpu_node_python and
# gpu_node_torch_note ("pinned" or what differs).
gpu_node_choose_torch() {
  local candidate pinned version
  pinned="$(sed -n 's/^torch==//p' requirements/torch.txt 2>/dev/null | head -n 1)"
  for candidate in "${DEEPOOL_TORCH_PYTHON:-}" .venv/bin/python "$(command -v python3 || true)"; do
    [[ -n "$candidate" && -x "$candidate" ]] || continue
    if version="$("$candidate" -c 'import torch; print(torch.__version__)' 2>/dev/null)"; then
      gpu_node_python="$(realpath -s "$candidate")"  # -s: a venv's python is a link
      if [[ "${version%%+*}" == "$pinned" ]]; then
        gpu_node_torch_note="the pinned torch $pinned"
      else
        gpu_node_torch_note="torch $version of $gpu_node_python, not the pinned $pinned"
        gpu_node_torch_note+=" (requirements/torch.txt): the node's own"
      fi
      echo "gpu-node-test: building against $gpu_node_torch_note"
      return 0
    fi
    [[ -n "${DEEPOOL_TORCH_PYTHON:-}" && "$candidate" == "$DEEPOOL_TORCH_PYTHON" ]] && {
      echo "gpu-node-test: DEEPOOL_TORCH_PYTHON=$candidate cannot import torch" >&2
      return 1
    }
  done
  echo "gpu-node-test: no torch: neither .venv/bin/python (scripts/install-torch.sh) nor python3" \
       "imports torch; set DEEPOOL_TORCH_PYTHON" >&2
  return 1
}

# Whether the node has a group's probe header (GPU_NODE_SYSTEM_ROOT, default /, lets a test
# pretend the node has nothing).
gpu_node_has_header() {
  local base="${GPU_NODE_SYSTEM_ROOT:-}" dir
  for dir in usr/include usr/local/include usr/include/x86_64-linux-gnu; do
    [[ -e "$base/$dir/$1" ]] && return 0
  done
  return 1
}

# Unpacks one .deb into a folder, without dpkg's database: dpkg-deb where the node has it, else
# ar and tar (binutils comes with any compiler).
gpu_node_unpack_deb() {
  local deb="$1" into="$2" member
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$into"
    return
  fi
  member="$(ar t "$deb" | grep '^data\.tar')" || return 1
  ar p "$deb" "$member" | tar -x -C "$into" -f - --auto-compress 2>/dev/null ||
    ar p "$deb" "$member" | tar -x -C "$into" -J -f -
}

# The build's dependencies. Each group of the pack (gpu-node-pack/gpu-node-deps.tar.gz, or
# PACK) that the node lacks, or every group with all=1, is unpacked into PREFIX; a group the
# node lacks with no pack is an error naming it and the command that makes the pack.
# Sets gpu_node_prefix ("" when nothing was unpacked), gpu_node_from_pack and gpu_node_from_system.
gpu_node_prepare_deps() {
  local pack="$1" prefix="$2" all="$3"
  local scratch group probe debs deb link target missing=()
  gpu_node_prefix="" gpu_node_from_pack="" gpu_node_from_system=""
  if [[ ! -f "$pack" ]]; then
    # Without a pack, the groups' probes are read from the script's own copy of the table.
    while IFS=$'\t' read -r group probe; do
      if gpu_node_has_header "$probe"; then
        gpu_node_from_system+="$group "
      else
        missing+=("$group (no $probe),")
      fi
    done < <(sed -n 's/^\([a-z0-9_]*\)\t\([^\t]*\)\t.*/\1\t\2/p' scripts/pack-gpu-node.sh)
    if [[ ${#missing[@]} -gt 0 ]]; then
      local lacks="${missing[*]}"
      echo "gpu-node-test: this node lacks ${lacks%,} and there is no pack ($pack): on a" \
           "machine with network run scripts/pack-gpu-node.sh and carry gpu-node-pack with the" \
           "tree (or, with network here, pass --install)" >&2
      return 1
    fi
    gpu_node_from_system="${gpu_node_from_system% }"
    echo "gpu-node-test: no pack; the node has every dependency ($gpu_node_from_system)"
    return 0
  fi
  scratch="$(mktemp -d)"
  tar -xzf "$pack" -C "$scratch" || { rm -rf "$scratch"; echo "gpu-node-test: cannot read $pack" >&2; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix"
  while IFS=$'\t' read -r group probe debs; do
    [[ "$group" == \#* || -z "$group" ]] && continue
    if [[ "$all" -ne 1 ]] && gpu_node_has_header "$probe"; then
      gpu_node_from_system+="$group "
      continue
    fi
    for deb in $debs; do
      gpu_node_unpack_deb "$scratch/debs/$deb" "$prefix" ||
        { rm -rf "$scratch"; echo "gpu-node-test: cannot unpack $deb" >&2; return 1; }
    done
    gpu_node_from_pack+="$group "
  done < "$scratch/groups.tsv"
  cp "$scratch/packed-from.txt" "$prefix/packed-from.txt"
  rm -rf "$scratch"
  # Debian's absolute links (zlib1g-dev's libz.so -> /lib/...) must point into the prefix.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    [[ "$target" == /* ]] && ln -sfn "$prefix$target" "$link"
  done < <(find "$prefix" -type l)
  gpu_node_prefix="$prefix" gpu_node_from_pack="${gpu_node_from_pack% }"
  gpu_node_from_system="${gpu_node_from_system% }"
  echo "gpu-node-test: from the pack ($(head -n 1 "$prefix/packed-from.txt")) into $prefix:" \
       "${gpu_node_from_pack:-nothing}; from the node: ${gpu_node_from_system:-nothing}"
}

# Configures BUILD_DIR for the GPU targets (no services: no gRPC, protobuf or OpenSSL needed)
# against gpu_node_python's torch and gpu_node_prefix, and builds TARGETS (all of them when
# "gpu": the GPU tests and the programs the script runs) with every core. Sets gpu_node_build_s.
gpu_node_configure_and_build() {
  local build_dir="$1" commit_label="$2" targets="$3" start
  local cmake_args=(-S . -B "$build_dir" -G Ninja -DDEEPOOL_WITH_SERVICES=OFF
                    "-DDEEPOOL_TORCH_PYTHON=$gpu_node_python" "-DDEEPOOL_COMMIT=$commit_label")
  if [[ -n "$gpu_node_prefix" ]]; then
    # Imported targets bring the prefix's headers; gloo's (included by torch's headers) and the
    # multiarch jconfig.h need it on every compile line, after the node's own.
    local usr="$gpu_node_prefix/usr"
    cmake_args+=("-DCMAKE_PREFIX_PATH=$usr"
                 "-DCMAKE_CXX_FLAGS=-idirafter $usr/include -idirafter $usr/include/x86_64-linux-gnu")
  fi
  start="$(date +%s)"
  cmake "${cmake_args[@]}" || { echo "gpu-node-test: configure failed (see above)" >&2; return 1; }
  if [[ "$targets" == gpu ]]; then
    local wanted=(deepool deepool-executor deepool-profile deepool-train deepool-bench-executor_overhead
                  deepool-bench-batch_norm deepool-bench-gpu_multiplex deepool-bench-profile-validation
                  deepool-bench-dp_vs_ddp deepool-bench-image-pipeline deepool-bench-memory_format)
    local known
    known="$(ninja -C "$build_dir" -t targets all | cut -d: -f1)"
    targets=""
    for target in "${wanted[@]}" $(grep -E '^[A-Za-z0-9_]+_gpu_test$' <<<"$known"); do
      if grep -qx -- "$target" <<<"$known"; then targets+="$target "; else
        echo "gpu-node-test: no target $target in this configuration; not built"
      fi
    done
  fi
  echo "gpu-node-test: building $targets with $(nproc) jobs"
  # shellcheck disable=SC2086  # the targets are words
  cmake --build "$build_dir" -j "$(nproc)" --target $targets ||
    { echo "gpu-node-test: build failed (see above)" >&2; return 1; }
  gpu_node_build_s=$(($(date +%s) - start))
}
