"""The mirror rule: snippets/<chapter>/<name>.<suffix> is tested by
tests/<chapter>/test_<name>.py (harness.torch_versions.snippets_of goes the other way)."""

from pathlib import Path

from harness.launch import ROOT, SNIPPETS


def snippet_files() -> list[Path]:
    """Every snippet: the files under snippets/ but captured outputs."""
    return [p for p in sorted(SNIPPETS.rglob("*"))
            if p.is_file() and p.suffix != ".out" and "__pycache__" not in p.parts]


def mirror_test(path: Path) -> Path:
    """tests/<chapter>/test_<name>.py for snippets/<chapter>/<name>.<any suffix>."""
    return ROOT / "tests" / path.parent.relative_to(SNIPPETS) / f"test_{path.stem}.py"
