# Sourced by a bench's run.sh (bash): can PyTorch 2.x run beside ours here?
# Sets (and exports) TORCH2_ROOT, default the sid root that the compat suite
# caches (tests/compat/mkroot.sh sid makes it), and sets
#   have_torch2  1 when bench/torch2/in-root can run that root's torch, else 0
#   torch2_ver   its torch version (e.g. 2.14.1+debian), "-" without one
#   torch2_why   without one: why not, in one line
TORCH2_ROOT=${TORCH2_ROOT:-/var/cache/ddprun-test/torch-sid}
export TORCH2_ROOT
have_torch2=0 torch2_ver=- torch2_why=
if [[ $(id -u) -ne 0 ]]; then
  torch2_why="needs root (bench/torch2/in-root: unshare -m, chroot)"
elif [[ ! -s $TORCH2_ROOT/.ddprun-root ]]; then
  torch2_why="no PyTorch 2.x root at $TORCH2_ROOT (tests/compat/mkroot.sh sid makes one)"
elif ! command -v unshare >/dev/null || ! command -v chroot >/dev/null; then
  torch2_why="unshare or chroot is missing"
else
  # mkroot.sh's marker: the version is its last line (torch may log before it)
  torch2_ver=$(tail -n 1 "$TORCH2_ROOT/.ddprun-root")
  have_torch2=1
fi
