"""snippets/troubleshooting/exit_abort.py, shown on docs/troubleshooting/crashes.md.

The abort itself comes in some runs only (harness.launch.EXIT_ABORT): these tests
show that the work and its output are the same either way, and that with --fix every
rank ends with exit code 0. Every other snippet ends with the same pause, so every run of
the test suite tries it again: any abort fails the test that saw it.
"""

from harness.launch import EXIT_ABORT, run
from tests.devices import on_each_device

SNIPPET = "troubleshooting/exit_abort.py"


@on_each_device(gpus=2, one_gpu=True)
def test_with_the_pause_every_rank_ends_with_exit_code_0(device):
    """On GPUs the gather runs over NCCL, on each process's own GPU (``device_id``)."""
    ranks = device.ranks(2)
    result = run(SNIPPET, "--fix", launcher="torchrun", nproc=ranks,
                 timeout=device.pick(60, 120), env=device.env())
    device.assert_ran(ranks, result=result)
    device.check_output(result)
    gathered = [rank + 1.0 for rank in range(ranks)]  # [1.0, 2.0] with 2 ranks
    assert result.stdout == f"rank 0 gathered {gathered} with {device.backend}\n"
    if not device.cuda:  # gloo's crash at exit
        assert not EXIT_ABORT.search(result.text)


def test_without_it_the_work_is_the_same_and_only_the_exit_may_abort():
    result = run(SNIPPET, launcher="torchrun", nproc=2, timeout=60, check=False)
    assert result.stdout == "rank 0 gathered [1.0, 2.0] with gloo\n"  # as with --fix
    assert not result.timed_out
    assert result.returncode == 0 or EXIT_ABORT.search(result.text), result.report()
