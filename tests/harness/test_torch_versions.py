"""harness/torch_versions.py: the records of the releases each snippet's tests passed on."""

import json

from harness import torch_versions as tv


def test_the_range_is_the_unbroken_run_of_passes_up_to_the_newest_pass():
    assert tv.tested_range({"2.4.1": "passed", "2.10.0": "passed", "2.6.0": "failed",
                            "2.13.0": "passed", "2.15.0": "failed"}) == ("2.10.0", "2.13.0")
    assert tv.tested_range({"2.4.1": "passed", "2.13.0": "passed"}) == ("2.4.1", "2.13.0")
    assert tv.tested_range({"2.13.0": "failed"}) is None
    assert tv.key("2.10.0") > tv.key("2.9.1") and tv.key("2.6.0+cu124") == (2, 6, 0)


def test_records_add_a_release_and_keep_the_others(tmp_path):
    path = tmp_path / "versions.json"
    tv.record({"ch/a.py": "passed", "ch/b.sbatch": "failed"}, "2.13.0", path)
    tv.record({"ch/a.py": "failed"}, "2.4.1", path)
    data = json.loads(path.read_text())
    assert data == {"ch/a.py": {"2.4.1": "failed", "2.13.0": "passed"},
                    "ch/b.sbatch": {"2.13.0": "failed"}}
    assert list(data["ch/a.py"]) == ["2.4.1", "2.13.0"]  # oldest first
    assert tv.claims(data) == {"ch/a.py": "2.13.0"}
    assert tv.oldest_claim(data) == "2.13.0"


def test_a_test_file_tests_the_snippets_of_its_mirrored_name():
    assert tv.snippets_of("tests/memory/test_deepspeed_zero.py") == [
        "memory/deepspeed_zero.py", "memory/deepspeed_zero.sbatch"]
    assert tv.snippets_of("tests/memory/test_ds_config_zero2.py") == ["memory/ds_config_zero2.json"]
    assert tv.snippets_of("tests/harness/test_launch.py") == []
    assert tv.snippets_of("tests/test_snippet_tests.py") == []


def test_every_snippet_shown_has_a_passing_release():
    """The build fails otherwise (docs/_ext/snippets.py): say which, sooner."""
    from harness.mirror import snippet_files
    claims = tv.claims()
    missing = [p.relative_to(tv.SNIPPETS).as_posix() for p in snippet_files()
               if "torch" in p.read_text().lower()
               and p.relative_to(tv.SNIPPETS).as_posix() not in claims]
    assert not missing, missing
