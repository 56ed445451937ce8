"""``python tests/recipes/signal_at_step.py RANK STEP SCRIPT ARGS...``, under any launcher,
runs SCRIPT as that launcher would, with one change: right after its STEP-th optimiser
step, the process of rank RANK sends SIGTERM to its process group (itself and its data
loader's workers), as torchrun does to each of its processes and Slurm to every process
of a job step. The signal and what the script does with it are the script's own; only
the moment is chosen, so that the stop lands mid-epoch in every run.
"""

import os
import runpy
import signal
import sys
from pathlib import Path


def signal_at(rank, step):
    """Make rank ``rank`` send its process group SIGTERM after its ``step``-th step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    steps = [0]

    def after_step(optimizer, args, kwargs):
        steps[0] += 1
        if steps[0] == step and int(os.environ["RANK"]) == rank:
            print(f"rank {rank}: SIGTERM after step {step}", file=sys.stderr, flush=True)
            os.killpg(os.getpgid(0), signal.SIGTERM)

    register_optimizer_step_post_hook(after_step)


if __name__ == "__main__":
    signal_at(int(sys.argv[1]), int(sys.argv[2]))
    sys.argv = sys.argv[3:]
    sys.path[0] = str(Path(sys.argv[0]).parent)
    runpy.run_path(sys.argv[0], run_name="__main__")
