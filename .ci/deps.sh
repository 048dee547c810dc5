#!/usr/bin/env bash
# Installs the Debian packages a make target needs, or says exactly how to.
#   .ci/deps.sh build|test|bench|all
# As root: apt-get update (once per run) and install what is missing.
# Otherwise: print the apt-get line and exit 1.
set -euo pipefail

build=(build-essential pkg-config libuv1-dev libcjson-dev liburing-dev)
test=(libcmocka-dev python3-pytest python3-pytest-xdist python3-torch mandoc groff iproute2 procps clang
      libclang-rt-14-dev cppcheck clang-format python3-pyflakes valgrind elfutils gdb slurm-wlm munge
      debootstrap)
bench=(python3-torch openmpi-bin libopenmpi-dev hyperfine)

want=()
case "${1:-build}" in
  build) want=("${build[@]}") ;;
  test)  want=("${build[@]}" "${test[@]}") ;;
  bench) want=("${build[@]}" "${bench[@]}") ;;
  all)   want=("${build[@]}" "${test[@]}" "${bench[@]}") ;;
  *) echo "deps.sh: unknown set '$1' (build, test, bench, all)" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $st == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

line="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "deps: missing Debian packages: ${missing[*]}" >&2
  echo "deps: run as root:  $line" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
