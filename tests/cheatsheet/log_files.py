"""The files torchrun writes with ``--log-dir=logs --redirects=3`` for ranks.py, which
torchrun_logs.sh and debug.sbatch of docs/cheatsheet.md both start."""

from pathlib import Path


def assert_log_files(workdir, world_size: int) -> Path:
    """ranks.py's lines of each local rank are in its own files under logs/; returns the
    folder of the run's first attempt."""
    attempts = list((workdir / "logs").glob("*/attempt_0"))
    assert len(attempts) == 1, attempts
    for rank in range(world_size):
        said = (attempts[0] / str(rank) / "stdout.log").read_text()
        assert said.endswith(f"rank {rank} of {world_size} (local rank {rank}): training\n")
        assert (attempts[0] / str(rank) / "stderr.log").read_text().endswith(
            f"rank {rank}: a warning\n")
    return attempts[0]
