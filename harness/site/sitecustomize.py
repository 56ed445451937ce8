"""Loaded by every Python process the test harness starts (it is on their PYTHONPATH).

It records which ranks joined a process group, so that the harness can fail a
run in which a rank never started. It does nothing unless the harness set
SNIPPET_HARNESS_RANKS_DIR, and it never imports torch itself: it waits until
the program imports ``torch.distributed.distributed_c10d``.
"""

import importlib.abc
import importlib.util
import os
import sys

_RANKS_DIR = os.environ.get("SNIPPET_HARNESS_RANKS_DIR")
_MODULE = "torch.distributed.distributed_c10d"


def _record(module):
    init = module.init_process_group

    def init_process_group(*args, **kwargs):
        init(*args, **kwargs)
        open(os.path.join(_RANKS_DIR, str(module.get_rank())), "w").close()

    init_process_group.__wrapped__ = init
    init_process_group.__doc__ = init.__doc__
    module.init_process_group = init_process_group


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_record(module):
            exec_module(module)
            _record(module)

        spec.loader.exec_module = exec_and_record
        return spec


if _RANKS_DIR:
    sys.meta_path.insert(0, _Finder())
