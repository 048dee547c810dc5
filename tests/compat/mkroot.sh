#!/usr/bin/env bash
# Makes (once) and caches a Debian root with a newer PyTorch for the compat suite.
#   tests/compat/mkroot.sh SUITE      (trixie: python3-torch 2.6, sid: the newest)
# The root lands in $DDP_ROOT_CACHE/torch-SUITE (default /var/cache/ddprun-test);
# a finished root has a .ddprun-root file holding its torch version, so a run cut
# short is made again, never used half-made. Prints the root's path.
# (Without /proc, torch prints UCX noise on stdout first: the last line counts.)
# Needs root and debootstrap (.ci/deps.sh test installs it). About 3 minutes
# and 1.7 GB a root. Nothing is mounted here: the tests bind /proc etc. inside
# their own mount namespace (tests/compat/torchroot.py).
set -euo pipefail
suite=${1:?usage: mkroot.sh trixie|sid}
case $suite in trixie|sid) ;; *) echo "mkroot.sh: unknown suite '$suite' (trixie, sid)" >&2; exit 2 ;; esac
cache=${DDP_ROOT_CACHE:-/var/cache/ddprun-test}
root=$cache/torch-$suite
if [[ -s $root/.ddprun-root ]]; then echo "$root"; exit 0; fi
if [[ $(id -u) -ne 0 ]]; then echo "mkroot.sh: needs root (debootstrap, chroot)" >&2; exit 1; fi
command -v debootstrap >/dev/null || { echo "mkroot.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
# The same mirror the host's apt uses.
mirror=$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$cache"
tmp=$root.partial
rm -rf "$tmp"
debootstrap --variant=minbase --include=python3-torch,python3-numpy "$suite" "$tmp" "$mirror" >"$cache/torch-$suite.log" 2>&1 \
  || { echo "mkroot.sh: debootstrap $suite failed, see $cache/torch-$suite.log" >&2; exit 1; }
ver=$(chroot "$tmp" python3 -c 'import torch; print(torch.__version__)' 2>/dev/null | tail -n 1) \
  || { echo "mkroot.sh: torch does not import in the new $suite root" >&2; exit 1; }
echo "$ver" >"$tmp/.ddprun-root"
rm -rf "$root"; mv "$tmp" "$root"
echo "$root"
