"""harness/outputs.py: captured outputs are compared by meaning, and wrong numbers fail.

The last tests go through every output file the pages show: each one must still
have figures that are compared after masking, and changing any compared figure by
more than the loosest tolerance a test may declare must fail the comparison.
"""

import re
from pathlib import Path

import pytest

from harness.launch import SNIPPETS
from harness.outputs import (COMPARED, FP32, LOOSEST, WITHOUT_COMMAND, WITHOUT_FIGURES,
                             Tolerance, check_text, differences, has_floats, mask,
                             split_command, tokens)

OUTPUTS = sorted(SNIPPETS.rglob("*.out"))
BF16 = Tolerance(rtol=5e-3, why="bf16 keeps 8 bits of mantissa")
DEMO = "python demo.py"


def agree(expected, actual, tolerance=FP32, path=None):
    return differences(expected, actual, path, tolerance) == []


@pytest.mark.parametrize("expected, actual", [
    ("loss 0.677095", "loss 0.677094"),  # fp32 on two CPUs: the last digit
    ("checksum -0.235071", "checksum -0.235072"),
    ("accuracy 87.5% on 1024 samples", "accuracy 87.6% on 1024 samples"),
    ("largest difference: 7.5e-09", "largest difference: 3.1e-08"),
    ("rank  loss\n   0  1.25", "rank loss\n 0 1.25"),  # column padding
    ("epoch 1 took 3.2 s", "epoch 1 took 11.0 s"),  # durations are masked
    ("joined at 127.0.0.1:41234", "joined at 127.0.0.1:29500"),
    ("File \"/tmp/snippet-ab12/train.py\", line 12", "File \"/home/me/train.py\", line 40"),
    ("SKIPPED [1] tests/x/test_y.py:164: needs 2 GPUs", "SKIPPED [1] tests/x/test_y.py:162: needs 2 GPUs"),
    ("0: node 0\n", "srun: Step created for job 123\n0: node 0\n"),  # srun's notes
    ("0: node 0\n", "srun: Job 12 step creation temporarily disabled, retrying (x)\n0: node 0\n"),
    ("PyTorch 2.13.0+cpu sees 0 GPUs", "PyTorch 2.8.0+cu128 sees 0 GPUs"),  # make test TORCH=
    ("Python environment: .venv", "Python environment: .venv-torch-2.10.0"),
])
def test_what_may_differ_between_two_machines_passes(expected, actual):
    assert agree(expected, actual)


@pytest.mark.parametrize("expected, actual, why", [
    ("loss 0.6771", "loss 0.6791", "0.6771 became 0.6791"),
    ("132,929 parameters", "132,928 parameters", "integer 929 became 928"),
    ("shape [64, 20]", "shape [64, 21]", "integer 20 became 21"),
    ("rank 0 of 2", "rank 1 of 2", "integer 0 became 1"),
    ("replicas identical: yes", "replicas identical: no", "'yes' became 'no'"),
    ("world size 2 (gloo, cpu)", "world size 2 (nccl, cuda)", "'(gloo,' became '(nccl,'"),
    ("loss 0.5\nloss 0.4", "loss 0.5", "2 lines captured, 1 in this run"),
    ("checksum -0.235071", "checksum 0.235071", "-0.235071 became 0.235071"),
    ("loss 0.5", "loss 0.5 nan", "number of figures differ"),
])
def test_a_change_in_meaning_fails_and_says_what_changed(expected, actual, why):
    found = differences(expected, actual)
    assert found and why in "\n".join(found)


def test_a_declared_tolerance_admits_reduced_precision_noise_and_no_more():
    # fsdp2.py --bf16 on one machine: 0.17152 with AVX-512, 0.17133 with the default kernels
    assert not agree("last-epoch loss 0.17152", "last-epoch loss 0.17133")
    assert agree("last-epoch loss 0.17152", "last-epoch loss 0.17133", BF16)
    assert not agree("last-epoch loss 0.17152", "last-epoch loss 0.17352", BF16)


def test_one_unit_of_the_last_printed_digit_is_allowed_and_no_more():
    assert agree("loss 0.1715", "loss 0.1716")  # 0.17155 rounds either way
    assert not agree("loss 0.1715", "loss 0.1718")


@pytest.mark.parametrize("kwargs", [dict(rtol=0.2, why="x"), dict(atol=1.0, why="x"),
                                    dict(rtol=1e-2, why=""), dict(rtol=1e-2, why="a\nb")])
def test_a_tolerance_must_be_tight_and_give_its_reason(kwargs):
    with pytest.raises(ValueError):
        Tolerance(**kwargs)


def test_check_text_fails_with_the_line_and_the_figures(tmp_path):
    script = tmp_path / "demo.py"
    script.write_text("print('loss 0.5000')\n")
    (tmp_path / "demo.out").write_text("$ python demo.py\nstep 10 loss 0.5000\n")
    check_text("step 10 loss 0.5003\n", script, command=DEMO)
    with pytest.raises(AssertionError, match=r"line 1: 0\.5000 became 0\.5100"):
        check_text("step 10 loss 0.5100\n", script, command=DEMO)


def test_the_command_shown_must_be_the_command_that_ran(tmp_path):
    script = tmp_path / "demo.py"
    script.write_text("print('loss 0.5000')\n")
    out = tmp_path / "demo.out"
    out.write_text("$ torchrun --standalone --nproc_per_node=2 demo.py\nloss 0.5000\n")
    with pytest.raises(AssertionError, match="the command it shows is not the command that ran"):
        check_text("loss 0.5000\n", script, command=DEMO)
    out.write_text("loss 0.5000\n")
    with pytest.raises(AssertionError, match="it shows no command"):
        check_text("loss 0.5000\n", script, command=DEMO)
    with pytest.raises(AssertionError, match="no command printed it"):
        check_text("loss 0.5000\n", script, command=())
    # paths and ports in a command are masked as in the output
    out.write_text("$ python demo.py --data /home/me/data.pt\nloss 0.5000\n")
    check_text("loss 0.5000\n", script, command="python demo.py --data /tmp/x1/data.pt")


def test_a_recorded_output_shows_the_runs_port_as_its_command_does(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATE_OUTPUTS", "1")
    script = tmp_path / "demo.py"
    script.write_text("print('port')\n")
    check_text("port 41234 in use (141234)\n", script, command="python demo.py", port=41234)
    assert (tmp_path / "demo.out").read_text() == "$ python demo.py\nport 29500 in use (141234)\n"


def test_update_commands_writes_the_command_and_keeps_the_output_but_not_a_drift(
        tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATE_OUTPUTS", "commands")
    script = tmp_path / "demo.py"
    script.write_text("print('loss 0.5000')\n")
    out = tmp_path / "demo.out"
    out.write_text("loss 0.5000\n")
    check_text("loss 0.5001\n", script, command=["python demo.py", "python demo.py"])
    assert out.read_text() == "$ python demo.py\n$ python demo.py\nloss 0.5000\n"
    with pytest.raises(AssertionError, match="has drifted"):
        check_text("loss 0.6000\n", script, command=DEMO)
    assert split_command(out.read_text()) == (["python demo.py"] * 2, "loss 0.5000\n")


def test_every_output_names_its_command_or_says_why_not():
    """What a page shows below a command is what that command printed; the few tables that
    no one command printed are listed with their reason."""
    unnamed = [out.relative_to(SNIPPETS).as_posix() for out in OUTPUTS
               if not split_command(out.read_text())[0]]
    assert sorted(unnamed) == sorted(WITHOUT_COMMAND)
    named = [name for name in WITHOUT_COMMAND if split_command(
        (SNIPPETS / name).read_text())[0]]
    assert not named


def test_only_outputs_with_floating_point_figures_are_compared_again_on_other_kernels(
        tmp_path, monkeypatch):
    """--only-compared reruns a test whose output has a float; words and integers alone,
    or a float masked as a duration, are compared exactly by the first run and left out."""
    assert has_floats("epoch 3  loss 0.2897\n")
    assert not has_floats("world size 4: ranks 0-3 on node2\n")
    assert not has_floats("done in 3.21 s\n")  # a duration, masked
    script = tmp_path / "demo.py"
    script.write_text("print('done')\n")
    for output, rerun in (("step 10 loss 0.5000\n", True), ("step 10 of 12\n", False)):
        test_id = f"tests/demo.py::test_{rerun}"
        monkeypatch.setenv("PYTEST_CURRENT_TEST", f"{test_id} (call)")
        (tmp_path / "demo.out").write_text(f"$ {DEMO}\n{output}")
        check_text(output, script, command=DEMO)
        assert (test_id in COMPARED) == rerun
        COMPARED.discard(test_id)


def test_what_a_script_prints_about_a_job_is_compared_for_the_default_profile_only(
        tmp_path, monkeypatch):
    script = tmp_path / "report.sh"  # no cluster lines of its own: not rendered
    script.write_text("echo job done\n")
    (tmp_path / "report.out").write_text("$ bash report.sh\n4 ranks done\n")
    drifted = "8 ranks done\n"  # what a job of another profile's shape prints
    with pytest.raises(AssertionError, match="has drifted"):
        check_text(drifted, script, job="troubleshooting/hang.sbatch", command="bash report.sh")
    monkeypatch.setenv("CENTRE", "profiles/amd.toml")
    # the job's: not compared
    check_text(drifted, script, job="troubleshooting/hang.sbatch", command="bash report.sh")
    with pytest.raises(AssertionError, match="has drifted"):
        check_text(drifted, script, command="bash report.sh")  # the script's own: compared


def perturbed(number: str) -> str:
    """The number changed by more than any tolerance a test may declare."""
    if not re.search(r"[.eE]", number):
        return str(int(number) + 1)
    value = float(number)
    decimals = len(number.lower().partition("e")[0].partition(".")[2])
    unit = 10.0 ** (int(number.lower().partition("e")[2] or 0) - decimals)
    new = value + 4 * LOOSEST * abs(value) + 10 * unit + 4 * LOOSEST
    return f"{new:.{decimals}e}" if "e" in number.lower() else f"{new:.{decimals}f}"


@pytest.mark.parametrize("path", OUTPUTS, ids=lambda p: str(p.relative_to(SNIPPETS)))
def test_every_compared_figure_of_every_output_file_is_checked(path: Path):
    text = split_command(path.read_text())[1]
    assert agree(text, text, path=path)
    loosest = Tolerance(rtol=LOOSEST, atol=LOOSEST, why="the loosest a test may declare")
    numbers = [m for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)]
    compared = 0
    for m in numbers:
        changed = text[:m.start()] + perturbed(m[0]) + text[m.end():]
        if mask(changed, path) == mask(text, path):
            continue  # masked: a duration, a port, a figure listed in VARYING
        compared += 1
        assert differences(text, changed, path, loosest), (
            f"{m[0]} -> {perturbed(m[0])} at offset {m.start()} passed the comparison")
    name = path.relative_to(SNIPPETS).as_posix()
    if numbers and name not in WITHOUT_FIGURES:
        assert compared, f"every figure of {name} is masked: nothing is compared"


def test_tokens_keep_ranges_and_signs_apart():
    assert tokens("ranks 0-1 loss -0.5") == [
        ("text", "ranks"), ("num", "0"), ("text", "-"), ("num", "1"),
        ("text", "loss"), ("num", "-0.5")]
