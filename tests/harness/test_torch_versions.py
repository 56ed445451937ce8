"""harness/torch_versions.py: the records of the releases each snippet's tests passed on,
each bound to the content it was made for."""

import json
import os
import re
import shutil
import subprocess
import sys

from harness import torch_versions as tv

JOB = "#!/bin/bash\n#SBATCH --nodes=1\nsrun python train.py  # one task per GPU\n"
TRAIN = '"""Train; the job script is job.sbatch."""\nimport torch  # the library\n\nprint(1)\n'


def snippets(tmp_path, files=None):
    """A snippets/ folder of its own: ch/job.sbatch runs ch/train.py; ch/other.py stands by."""
    files = files or {"ch/job.sbatch": JOB, "ch/train.py": TRAIN, "ch/other.py": "print(2)\n",
                      "ch/train.out": "1\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_range_is_the_unbroken_run_of_passes_up_to_the_newest_pass():
    assert tv.tested_range({"2.4.1": "passed", "2.10.0": "passed", "2.6.0": "failed",
                            "2.13.0": "passed", "2.15.0": "failed"}) == ("2.10.0", "2.13.0")
    assert tv.tested_range({"2.4.1": "passed", "2.13.0": "passed"}) == ("2.4.1", "2.13.0")
    assert tv.tested_range({"2.13.0": "failed"}) is None
    assert tv.key("2.10.0") > tv.key("2.9.1") and tv.key("2.6.0+cu124") == (2, 6, 0)


def test_records_add_a_release_keep_the_others_and_name_their_content(tmp_path):
    path = tmp_path / "versions.json"
    tv.record({"ch/a.py": "passed", "ch/b.sbatch": "failed"}, "2.13.0", path,
              contents={"ch/a.py": "aaaaaaaaaaaa", "ch/b.sbatch": "bbbbbbbbbbbb"})
    tv.record({"ch/a.py": "failed"}, "2.4.1", path, contents={"ch/a.py": "aaaaaaaaaaaa"})
    data = json.loads(path.read_text())
    assert data == {"ch/a.py": {"2.4.1": {"outcome": "failed", "content": "aaaaaaaaaaaa"},
                                "2.13.0": {"outcome": "passed", "content": "aaaaaaaaaaaa"}},
                    "ch/b.sbatch": {"2.13.0": {"outcome": "failed", "content": "bbbbbbbbbbbb"}}}
    assert list(data["ch/a.py"]) == ["2.4.1", "2.13.0"]  # oldest first
    # one line per record: a diff of the file shows which records changed
    assert '  "2.4.1": {"outcome": "failed", "content": "aaaaaaaaaaaa"},\n' in path.read_text()
    assert tv.matching(data["ch/a.py"], "aaaaaaaaaaaa") == {"2.4.1": "failed", "2.13.0": "passed"}
    assert tv.matching(data["ch/a.py"], "cccccccccccc") == {}
    assert tv.claims({"ch/a.py": {"2.4.1": "failed", "2.13.0": "passed"}}) == {"ch/a.py": "2.13.0"}
    assert tv.oldest_claim({"ch/a.py": {"2.13.0": "passed"}, "ch/b.py": {"2.8.0": "passed"}}) \
        == "2.8.0"


def test_comments_of_python_do_not_change_its_content_and_code_does(tmp_path):
    root = snippets(tmp_path)
    before = tv.content("ch/train.py", root)

    def after(text):
        (root / "ch/train.py").write_text(text)
        return tv.content("ch/train.py", root)

    # a marker comment an excerpt starts at, a reworded comment, a blank line: the same
    assert after(TRAIN.replace("import torch", "# [start]\n\nimport torch  # it")) == before
    assert after(TRAIN.replace("print(1)", "print(2)")) != before        # what it prints
    assert after(TRAIN.replace("Train;", "Train:")) != before              # a docstring
    assert after(TRAIN + 's = """a\n\nb"""\n') != after(TRAIN + 's = """a\nb"""\n')  # a string
    assert after("def f(:\n  # broken\n") != after("def f(:\n  # not the same\n")  # untokenizable


def test_every_byte_of_a_job_script_counts_and_the_files_it_names_count_too(tmp_path):
    root = snippets(tmp_path)
    job, train = tv.content("ch/job.sbatch", root), tv.content("ch/train.py", root)
    assert tv.dependencies("ch/job.sbatch", root) == ["ch/train.py"]
    assert tv.dependencies("ch/train.py", root) == ["ch/job.sbatch"]  # its docstring names it
    (root / "ch/other.py").write_text("print(3)\n")                    # not named: no change
    (root / "ch/train.out").write_text("2\n")                          # outputs do not count
    assert tv.content("ch/job.sbatch", root) == job
    (root / "ch/train.py").write_text(TRAIN.replace("print(1)", "print(2)"))
    assert tv.content("ch/job.sbatch", root) != job                    # the script it runs
    (root / "ch/train.py").write_text(TRAIN)
    (root / "ch/job.sbatch").write_text(JOB.replace("one task", "a task"))
    assert tv.content("ch/job.sbatch", root) != job                    # a comment of a job script
    assert tv.content("ch/train.py", root) != train                    # and what names it


def test_an_edit_leaves_only_the_releases_its_new_content_passed(tmp_path):
    """A page's range comes from current(): after an edit, only the releases recorded
    since; with none, the snippet claims nothing (and the build fails, docs/_ext)."""
    root, path = snippets(tmp_path / "snippets"), tmp_path / "versions.json"
    for release in ("2.6.0", "2.10.0", "2.13.0"):
        tv.record({"ch/train.py": "passed"}, release, path,
                  contents={"ch/train.py": tv.content("ch/train.py", root)})
    data = tv.load(path)
    assert tv.tested_range(tv.current(data, root)["ch/train.py"]) == ("2.6.0", "2.13.0")
    (root / "ch/train.py").write_text(TRAIN.replace("print(1)", "print(2)"))
    assert tv.current(data, root) == {} and tv.claims(tv.current(data, root)) == {}
    tv.record({"ch/train.py": "passed"}, "2.13.0", path,
              contents={"ch/train.py": tv.content("ch/train.py", root)})
    data = tv.load(path)
    assert tv.current(data, root) == {"ch/train.py": {"2.13.0": "passed"}}
    assert tv.tested_range(tv.current(data, root)["ch/train.py"]) == ("2.13.0", "2.13.0")
    assert len(data["ch/train.py"]) == 3  # the older records stay in the file, unshown


def test_the_oldest_claim_ci_runs_counts_current_records_only(tmp_path):
    snippet = "cheatsheet/debug.sbatch"
    data = tmp_path / "versions.json"
    data.write_text(json.dumps({snippet: {
        "2.4.1": {"outcome": "passed", "content": "000000000000"},  # of an older content
        "2.10.0": {"outcome": "passed", "content": tv.content(snippet)}}}))
    done = subprocess.run([sys.executable, "-m", "harness.torch_versions", "oldest"],
                          cwd=tv.ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, tv.DATA_ENV: str(data)})
    assert done.stdout == "2.10.0\n", done.stdout + done.stderr


def test_a_test_file_tests_the_snippets_of_its_mirrored_name():
    assert tv.snippets_of("tests/memory/test_deepspeed_zero.py") == [
        "memory/deepspeed_zero.py", "memory/deepspeed_zero.sbatch"]
    assert tv.snippets_of("tests/memory/test_ds_config_zero2.py") == ["memory/ds_config_zero2.json"]
    assert tv.snippets_of("tests/harness/test_launch.py") == []
    assert tv.snippets_of("tests/test_snippet_tests.py") == []


def test_a_record_counts_only_for_the_content_it_was_made_for(tmp_path):
    """Over the real records: each snippet's current records are those whose content is
    the file's now, and an edit of the file (in a copy) leaves it none."""
    data = tv.load()
    assert all(re.fullmatch(r"[0-9a-f]{12}", record["content"]) and record["outcome"]
               in ("passed", "failed") for records in data.values() for record in records.values())
    current = tv.current(data)
    assert current, "no record matches its snippet's content"
    root = tmp_path / "snippets"
    shutil.copytree(tv.SNIPPETS, root, ignore=shutil.ignore_patterns("*.out", "__pycache__"))
    for snippet, releases in current.items():
        assert releases == tv.matching(data[snippet], tv.content(snippet))
        file = root / snippet
        if file.suffix == ".ipynb":
            notebook = json.loads(file.read_text())
            next(c for c in notebook["cells"] if c["cell_type"] == "code")["source"].append("\n1")
            file.write_text(json.dumps(notebook))
        else:
            file.write_text(file.read_text() + "\nexit\n")
    assert tv.current(data, root) == {}


def test_every_snippet_shown_has_a_passing_release():
    """The build fails otherwise (docs/_ext/snippets.py): say which, sooner."""
    from harness.mirror import snippet_files
    claims = tv.claims()
    missing = [p.relative_to(tv.SNIPPETS).as_posix() for p in snippet_files()
               if "torch" in p.read_text().lower()
               and p.relative_to(tv.SNIPPETS).as_posix() not in claims]
    assert not missing, "no release recorded for their content now: " + "; ".join(
        f"make check SNIPPET={path}" for path in missing)
