"""``python tests/kill_in_save.py N SCRIPT ARGS...``, under any launcher, runs SCRIPT as
that launcher would, with one change: its N-th ``torch.save`` writes through a file object
that sends SIGKILL to the process once half of the checkpoint's bytes are in the file. The
write is PyTorch's own, to the file the script named; only the moment of the kill is
chosen. tests/killed_save.py runs it.
"""

import io
import os
import runpy
import signal
import sys
from pathlib import Path


class _KillHalfway(io.RawIOBase):
    """An unbuffered file that kills its process once half of ``total`` bytes are in it."""

    def __init__(self, path, total):
        self.file, self.total, self.written = open(path, "wb", buffering=0), total, 0

    def writable(self):
        return True

    def write(self, data):
        count = self.file.write(data)
        self.written += count
        if self.written >= self.total // 2:
            print(f"killed after {self.written} of {self.total} bytes of {self.file.name}",
                  file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return count


def kill_in_save(number):
    """Make the ``number``-th call of torch.save kill its process halfway."""
    import torch

    save, calls = torch.save, [0]

    def killing_save(obj, f, *args, **kwargs):
        calls[0] += 1
        if calls[0] < number:
            return save(obj, f, *args, **kwargs)
        size = io.BytesIO()
        save(obj, size, *args, **kwargs)  # only to learn the size
        save(obj, _KillHalfway(f, size.tell()), *args, **kwargs)

    torch.save = killing_save


if __name__ == "__main__":
    kill_in_save(int(sys.argv[1]))
    sys.argv = sys.argv[2:]
    sys.path[0] = str(Path(sys.argv[0]).parent)
    runpy.run_path(sys.argv[0], run_name="__main__")
