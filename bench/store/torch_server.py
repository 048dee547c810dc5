"""The anchor of bench/store: PyTorch 1.13's own TCPStore server (Debian's
python3-torch), on a free loopback port. Prints the port, then serves until
killed (or for an hour at most)."""
import time
from datetime import timedelta

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=300))
print(store.port, flush=True)
time.sleep(3600)
