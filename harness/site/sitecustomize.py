"""Loaded by every Python process the test harness starts (it is on their PYTHONPATH).

It records which ranks joined a process group, so that the harness can fail a
run in which a rank never started (when the harness set SNIPPET_HARNESS_RANKS_DIR).

With SNIPPET_HARNESS_DEVICE=cpu (every test not marked multigpu) it hides the GPUs
from PyTorch: ``torch.cuda.is_available()`` is False and ``device_count()`` 0, and so
are ``torch.accelerator.is_available()`` and ``device_count()``, which ask them. The
snippets take their gloo + CPU path on a GPU node too, and their output is the one the
pages show. It does not touch CUDA_VISIBLE_DEVICES, which Slurm sets in a job and some
snippets print.

It leaves alone what PyTorch was built for: ``torch._C._get_accelerator()`` and
``torch.accelerator.current_accelerator()`` (without ``check_available``) say "cuda" in
a CUDA build even when no GPU is visible (at::accelerator::getAccelerator asks the build,
not the devices), and so they do for a reader who runs a script on the CPU with such a
build. ``fully_shard`` without ``mesh=``, for one, shards onto that device: a snippet that
relies on it fails its CPU test on a GPU node, as it would fail that reader.

SNIPPET_HARNESS_FAKE_GPUS=N (for the harness's own test, tests/harness/test_gpu_hiding.py)
pretends to be a CUDA build on a node with N GPUs: ``torch._C._get_accelerator()`` and
``torch.accelerator.current_accelerator()`` say "cuda", and, unless the GPUs are hidden,
``torch.cuda.is_available()`` is True and ``device_count()`` N. Only the answers are
faked: a snippet that believes them asks for a CUDA device or NCCL, and fails.

With SNIPPET_HARNESS_CPU_LOG=file (``make bench``) each process appends its CPU seconds
and its command line to that file when it exits, so that the bench can say which
launches the suite's time goes to.

It never imports torch itself: it waits until the program imports the module it
changes, then changes it once that module has run.
"""

import atexit
import importlib.abc
import importlib.util
import json
import os
import resource
import sys

_RANKS_DIR = os.environ.get("SNIPPET_HARNESS_RANKS_DIR")
_HIDE_GPUS = os.environ.get("SNIPPET_HARNESS_DEVICE") == "cpu"
_FAKE_GPUS = int(os.environ.get("SNIPPET_HARNESS_FAKE_GPUS", "0"))
_CPU_LOG = os.environ.get("SNIPPET_HARNESS_CPU_LOG")


def _record(module):
    init = module.init_process_group

    def init_process_group(*args, **kwargs):
        init(*args, **kwargs)
        open(os.path.join(_RANKS_DIR, str(module.get_rank())), "w").close()

    init_process_group.__wrapped__ = init
    init_process_group.__doc__ = init.__doc__
    module.init_process_group = init_process_group


def _gpus(module, count):
    """torch.cuda says that ``count`` GPUs are visible."""
    module.is_available = lambda: count > 0
    module.device_count = lambda: count


def _cuda_build():
    """torch._C says that PyTorch was built for CUDA, as torch.accelerator and the
    distributed package ask it (the functions it would have in a CUDA build)."""
    torch = sys.modules["torch"]
    torch._C._get_accelerator = lambda check=None: torch.device("cuda")
    torch._C._accelerator_getAccelerator = lambda: torch.device("cuda")


def _change_cuda(module):
    if _FAKE_GPUS:
        _cuda_build()
    _gpus(module, 0 if _HIDE_GPUS else _FAKE_GPUS)


class _Finder(importlib.abc.MetaPathFinder):
    """Runs ``change(module)`` after the module ``name`` has been executed."""

    def __init__(self, name, change):
        self.name, self.change = name, change

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_change(module):
            exec_module(module)
            self.change(module)

        spec.loader.exec_module = exec_and_change
        return spec


if _RANKS_DIR:
    sys.meta_path.insert(0, _Finder("torch.distributed.distributed_c10d", _record))
if _HIDE_GPUS or _FAKE_GPUS:
    sys.meta_path.insert(0, _Finder("torch.cuda", _change_cuda))  # torch._C is loaded by then


def _account():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({"cpu": round(usage.ru_utime + usage.ru_stime, 3), "argv": sys.argv})
    with open(_CPU_LOG, "a") as log:
        log.write(line + "\n")


if _CPU_LOG:
    atexit.register(_account)
