"""Debian's torchrun 1.13 with one fix: on Python 3.11 its Std.from_str cannot
parse "0" (IntFlag iteration skips Std.NONE), so plain `torchrun` crashes on
its default -r 0 -t 0. This wrapper parses those codes correctly and then runs
torch.distributed.run.main() unchanged."""
import re
import sys

from torch.distributed.elastic.multiprocessing import api
from torch.distributed.run import main


def from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(from_str)

if __name__ == "__main__":
    sys.argv[0] = "torchrun"
    sys.exit(main())
