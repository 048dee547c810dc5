"""The one change the compat suite makes to Debian's PyTorch 2.x (on
PYTHONPATH only for the roots' runs, tests/compat/torchroot.py).

Debian builds libtorch without libuv, yet TCPStore(...) defaults to
use_libuv=True: a client made without the argument raises "use_libuv was
requested but PyTorch was built without libuv support". PyTorch's own
init_process_group("env://") under an agent store (torchrun's and ddprun's,
torch/distributed/rendezvous.py _create_c10d_store) and torchrun itself make
TCPStore that way, so on Debian they fail before any ddprun code is reached.
Here TCPStore's use_libuv default becomes False; an explicit use_libuv=...
is kept. The wire protocol does not depend on it (the libuv switch selects
the *server* backend; only queue methods check it on the client side)."""
import sys


def _patch():
    try:
        import torch
        import torch.distributed as dist
    except Exception:  # a Python without torch: nothing to change
        return
    if int(torch.__version__.split(".")[0]) < 2 or not hasattr(dist, "TCPStore"):
        return
    if getattr(dist.TCPStore, "_ddprun_nolibuv", False):
        return
    base = dist.TCPStore

    class TCPStore(base):
        _ddprun_nolibuv = True

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    dist.TCPStore = TCPStore
    # `import torch.distributed.rendezvous as r` would bind the function of
    # that name (torch.distributed.rendezvous): take the module itself.
    rdzv = sys.modules.get("torch.distributed.rendezvous")
    if rdzv is not None and hasattr(rdzv, "TCPStore"):
        rdzv.TCPStore = TCPStore
    for name in ("torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
                 "torch.distributed.elastic.utils.distributed"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "TCPStore", None) is base:
            mod.TCPStore = TCPStore


_patch()
