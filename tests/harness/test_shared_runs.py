"""harness.launch.shared: a run that tests in several processes check happens once."""

import os
import subprocess
import sys

from harness.launch import DEVICE_ENV, ROOT, SHARED_RUNS, shared

CALLER = """\
import sys, time
from pathlib import Path
from harness.launch import shared

@shared
def slow_run(name):
    with open(sys.argv[1], "a") as log:
        log.write(name + "\\n")
    time.sleep(1)
    return {"ran by": sys.argv[2]}

print(slow_run("a")["ran by"], slow_run("a")["ran by"], slow_run("b")["ran by"])
"""


def callers(tmp_path, count):
    log = tmp_path / "calls.txt"
    procs = [subprocess.Popen([sys.executable, "-c", CALLER, str(log), str(i)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
             for i in range(count)]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outputs, sorted(log.read_text().split())


def test_three_processes_share_each_run(tmp_path, monkeypatch):
    folder = tmp_path / "shared"
    folder.mkdir()
    monkeypatch.setenv(SHARED_RUNS, str(folder))
    outputs, calls = callers(tmp_path, 3)
    assert calls == ["a", "b"]  # each run once, whoever asked first
    assert len({out[0] for out in outputs}) == 1 and len({out[2] for out in outputs}) == 1
    assert all(out[0] == out[1] for out in outputs)


def test_without_the_session_folder_each_process_runs_its_own(tmp_path, monkeypatch):
    monkeypatch.delenv(SHARED_RUNS, raising=False)
    outputs, calls = callers(tmp_path, 2)
    assert calls == ["a", "a", "b", "b"]
    assert [out[0] for out in outputs] == ["0", "1"]


def test_a_cpu_test_and_a_gpu_test_never_share_a_run(tmp_path, monkeypatch):
    """On a GPU node a CPU test's run is not a GPU test's run, whichever comes first."""
    calls = []

    def cache():  # what one test process has: its own cache, the session's folder
        def device_of_run(name):
            calls.append(os.environ.get(DEVICE_ENV))
            return os.environ.get(DEVICE_ENV)
        return shared(device_of_run)

    first, second = cache(), cache()
    monkeypatch.setenv(SHARED_RUNS, str(tmp_path))
    monkeypatch.setenv(DEVICE_ENV, "cpu")  # a test not marked multigpu
    assert first("a") == "cpu" and second("a") == "cpu"
    monkeypatch.delenv(DEVICE_ENV)  # a multigpu test
    assert second("a") is None and first("a") is None
    assert calls == ["cpu", None]  # each device's run once
