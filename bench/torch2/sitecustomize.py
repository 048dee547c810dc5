# On PYTHONPATH for PyTorch 2.x from Debian, which is built without libuv while
# TCPStore defaults to use_libuv=True (so its torchrun fails at start): change
# that one default, nothing else (../../README.md, Benchmarks).
import importlib
try:
    import torch.distributed as _dist
except Exception:  # not every python here has torch
    _dist = None
if _dist is not None and hasattr(_dist, "TCPStore"):
    _Base = _dist.TCPStore

    class TCPStore(_Base):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    _dist.TCPStore = TCPStore
    importlib.import_module("torch.distributed.rendezvous").TCPStore = TCPStore
