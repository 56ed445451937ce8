"""Every snippet has a test named after it, and that test uses it."""

from harness.launch import ROOT, SNIPPETS


def snippet_files():
    return [p for p in sorted(SNIPPETS.rglob("*"))
            if p.is_file() and p.suffix != ".out" and "__pycache__" not in p.parts]


def test_there_are_snippets():
    assert snippet_files()


def test_every_snippet_has_a_test_that_names_it():
    missing = []
    for path in snippet_files():
        rel = path.relative_to(SNIPPETS)
        test = ROOT / "tests" / rel.parent / f"test_{path.stem}.py"
        if not test.is_file():
            missing.append(f"{rel}: no {test.relative_to(ROOT)}")
        elif rel.as_posix() not in test.read_text():
            missing.append(f"{rel}: {test.relative_to(ROOT)} never names it")
    assert not missing, "\n".join(missing)


def test_every_captured_output_belongs_to_a_snippet():
    orphans = []
    for out in sorted(SNIPPETS.rglob("*.out")):
        stem = out.name.split(".")[0]
        if not any(p.stem == stem and p.suffix != ".out" for p in out.parent.iterdir()):
            orphans.append(str(out.relative_to(ROOT)))
    assert not orphans, orphans


def test_snippet_lines_fit_the_page():
    """Lines of at most 88 characters show without scrolling sideways."""
    long = [f"{p.relative_to(ROOT)}:{n}" for p in snippet_files()
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 88]
    assert not long, long
