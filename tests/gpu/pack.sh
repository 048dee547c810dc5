#!/usr/bin/env bash
# Builds the GPU check here (CUDA=1 into build-gpu/, tests/gpu/run.sh's build)
# for a GPU machine that lacks the build's dependencies, and copies the shared
# libraries the binaries need beyond glibc and CUDA (libuv, cJSON, liburing,
# cmocka) into build-gpu/lib/dep. There: tests/gpu/run.sh --prebuilt. NCCL
# (over 200 MB) stays behind: run.sh finds the GPU machine's own. Objects are
# removed so that the folder travels light (about 30 MB).
#   tests/gpu/pack.sh [-j JOBS]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build-gpu
jobs=$(nproc 2>/dev/null || echo 2)
while (($#)); do
  case $1 in
    -j) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "tests/gpu/pack.sh: -j needs a number" >&2; exit 2; }
        jobs=$2; shift 2 ;;
    *) echo "tests/gpu/pack.sh: unknown argument '$1' (-j JOBS)" >&2; exit 2 ;;
  esac
done
make -j"$jobs" B="$B" CUDA=1 check-build
mkdir -p "$B/lib/dep"
rm -f "$B/lib/dep"/*
bins=("$B"/bin/* "$B"/tests/progs/* "$B"/tests/unit/*)
# ldd fails on anything not dynamically linked: what it could read counts.
{ ldd "${bins[@]}" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
  while read -r name path; do
    case $name in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
      libcuda.so*|libcudart.so*|libnccl.so*) ;;
      *) cp -L "$path" "$B/lib/dep/$name" ;;
    esac
  done
rm -rf "$B/obj"
echo "tests/gpu/pack.sh: $B ready ($(du -sh "$B" | cut -f1)); libraries: $(ls "$B/lib/dep" | tr '\n' ' ')"
