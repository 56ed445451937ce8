"""Show snippets on pages, offer them for download, and refuse snippets no page uses.

``snippet`` literal-includes a file from ``snippets/`` (path relative to that
folder), captions it with its name and adds a download link under it. With an option
that picks part of the file (``:pyobject:``, ``:start-at:``, ``:end-before:`` ...) it
shows an excerpt: captioned "Excerpt of <name> (...)", without a download link, which
the file's whole view offers (tests/site/test_code_blocks.py keeps code on pages to
snippets and excerpts).
``snippet-output`` shows a captured ``.out`` file. After reading, every file in
``snippets/`` must have been included by some page (and, unless it is captured
output, offered for download); Sphinx's own records of included and
downloadable files are the evidence, so a file nobody uses is a build warning,
and with ``-W`` an error.

A notebook (``.ipynb``) is shown as its code cells, one block each, captioned with
the notebook's name and the cell's number, followed by its download link.

Job scripts (``.sbatch``) follow the centre profile (``harness/profile.py``, the
``centre`` setting of conf.py): the page shows, and offers for download, the script
the profile renders, which is the one the tests submit. The rendered copies live in
the build's doctree folder, under ``rendered/``. For a partition that takes fewer nodes
than the script asks for (``max_nodes``), one sentence stands in its place: the nodes
the job needs, the partition's limit, and the partitions that take it.

How each page was tested goes into one collapsed box under its title, and nowhere else:
what the page's ``how-tested`` directive says (the launcher, the processes, the machine,
what was not run), then, computed here, the releases of PyTorch every snippet of the page
passed its tests on, as it is now (``snippets_torch_versions``: only the records made for
its content count, harness/torch_versions.py), and which of them have run on GPUs, on which
GPUs and when (``snippets_gpu_runs``, harness/gpu_report.py). A snippet that uses PyTorch
(its text names torch) and has no tested release for its content fails the build.

For a profile whose environment names its release of PyTorch (``[environment] torch``),
a note under each script it cannot run as it is says why and what to change (a newer
PyTorch, a missing package: harness/software.py), the box says which release it gives
beside the range, and the build ends with one line (information, not a warning) with
their count and ``python -m harness.software``, which lists them; the Your cluster page
lists them too (docs/_ext/centre.py). Nothing of this for a profile without ``torch``.

``{from-run}`path: regex``` writes into a sentence the text that the regex's group matches
in the first matching line of a captured output (``path`` relative to ``snippets/``), so a
sentence that restates a run's figure changes with the run; a regex that no longer matches
fails the build.
"""

import functools
import json
import os
import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.directives.code import LiteralInclude, container_wrapper
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective, SphinxRole

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the guide's top folder
from harness.gpu_report import ran_on_gpus  # noqa: E402
from harness.torch_versions import (  # noqa: E402
    content, dependencies, key as _key, matching, tested_range)

logger = logging.getLogger(__name__)

LANGUAGES = {".py": "python", ".sh": "bash", ".sbatch": "bash", ".json": "json",
             ".yaml": "yaml", ".yml": "yaml", ".out": "text", ".txt": "text"}


def snippets_dir(env) -> Path:
    return (Path(env.srcdir) / env.config.snippets_dir).resolve()


def _target(env, path: str) -> str:
    """The path as Sphinx expects it: leading slash means relative to the source folder."""
    return "/" + str(Path(env.config.snippets_dir) / path)


def rendered_dir(env) -> Path:
    return Path(env.doctreedir) / "rendered"


#: Under rendered/, the job scripts of each partition but the first, a folder each.
PARTITIONS = "partitions"


def _profile_module():
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from harness import profile
    return profile


def _centre(env):
    profile = _profile_module()
    return profile.load(env.config.centre or None)


def _rendered_target(env, path: str, partition: str | None = None) -> str:
    """Render job script ``path`` for the build's profile (for ``partition``, else its
    first); its target for Sphinx."""
    profile = _profile_module()
    original = snippets_dir(env) / path
    centre = _centre(env)
    first = partition is None or centre.partition_named(partition) == centre.partition
    folder = (partition or "").replace(":", "-")
    copy = rendered_dir(env) / (path if first else f"{PARTITIONS}/{folder}/{path}")
    copy.parent.mkdir(parents=True, exist_ok=True)
    text = profile.render_file(original, centre, partition)
    if not copy.exists() or copy.read_text() != text:
        copy.write_text(text)
    env.note_dependency(str(original))
    return "/" + os.path.relpath(copy, env.srcdir)


def _either(items: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


def runs_nowhere(env, path: Path) -> bool:
    """Whether job script ``path`` asks for more nodes than a job on any partition of the
    build's profile may have: its pages show a sentence in its place, and no download."""
    profile, centre = _profile_module(), _centre(env)
    for part in centre.partitions:
        try:
            profile.render_file(path, centre, centre.label(part))
        except profile.TooManyNodes:
            continue
        return False
    return True


def _range_text(oldest: str, newest: str) -> str:
    return f"PyTorch {oldest}" if oldest == newest else f"PyTorch {oldest} to {newest}"


def _versions(env) -> dict:
    path = Path(env.srcdir) / env.config.snippets_torch_versions
    return _parsed(path, path.stat().st_mtime_ns) if path.is_file() else {}


@functools.lru_cache(maxsize=2)  # once a build, not once a snippet (make bench)
def _parsed(path: Path, mtime: int) -> dict:
    return json.loads(path.read_text())


#: The options that show part of a file: a snippet with one is an excerpt of the file.
SELECTION = {"pyobject", "lines", "start-at", "start-after", "end-at", "end-before"}


class Snippet(LiteralInclude):
    """Include a snippet with its file name as caption and a download link. A job script,
    for a profile with several GPU partitions, is one tab per partition, the first
    partition's first (``:partition:`` shows one)."""

    download = True
    option_spec = {**LiteralInclude.option_spec, "partition": lambda value: value.strip()}

    def run(self):
        env = self.state.document.settings.env
        path = self.arguments[0]
        if Path(path).suffix == ".ipynb":
            return self.notebook(env, path)
        if _profile_module().needs_rendering(path):
            centre = _centre(env)
            if self.download and "partition" not in self.options and len(centre.partitions) > 1:
                return self.partition_tabs(path, centre) + self.software_notes(env, path)
            try:
                self.arguments[0] = _rendered_target(env, path, self.options.get("partition"))
            except _profile_module().TooManyNodes as error:
                return self.too_many_nodes(env, path, centre, error)
        else:
            self.arguments[0] = _target(env, path)
        self.options.setdefault("language", LANGUAGES.get(Path(path).suffix, "text"))
        excerpt = self.download and not SELECTION.isdisjoint(self.options)
        self.options["caption"] = self.caption(path, excerpt)
        result = super().run()
        if self.download:  # the file shown: a job script as the profile renders it
            if not excerpt:  # an excerpt's file is offered where the page shows it whole
                result.append(self.download_link(env, path, self.arguments[0]))
            result.extend(self.tested_with(env, path))
            if not excerpt and "partition" not in self.options:  # once, not in each tab
                result.extend(self.software_notes(env, path))
        return result

    def caption(self, path: str, excerpt: bool) -> str:
        """The file's name, or the caption given; an excerpt's says it is one, and its
        caption given must start with the file's name."""
        name = Path(path).name
        caption = self.options.get("caption", name)
        if not excerpt:
            return caption
        if not caption.startswith(name):
            logger.warning("the caption %r of an excerpt of %s does not start with %s",
                           caption, path, name, location=self.get_location(),
                           type="snippets", subtype="excerpt")
        return f"Excerpt of {caption}"

    def partition_tabs(self, path: str, centre) -> list:
        """The job script once per partition, in tabs named after them."""
        options = [f":{key}:" + ("" if value is None else f" {json.dumps(str(value))}")
                   for key, value in self.options.items()]
        lines = ["`````{tab-set}"]
        for part in centre.partitions:
            label = centre.label(part)
            lines += [f"````{{tab-item}} {label}", f"```{{{self.name}}} {path}",
                      f":partition: {label}", *options, "```", "````"]
        lines.append("`````")
        node = nodes.container()
        self.state.nested_parse(StringList(lines, "partition tabs"), self.content_offset, node)
        return node.children

    def too_many_nodes(self, env, path: str, centre, error) -> list:
        """In place of a job script for more nodes than a job on the partition may have
        (``max_nodes``): one sentence that says so, and on which partitions it runs."""
        env.note_dependency(str(snippets_dir(env) / path))
        part = error.partition
        about = f" ({part.description})" if part.description else ""
        takers = [f"`{centre.label(p)}`" for p in centre.partitions if p.takes(error.nodes)]
        where = (f"run it on {_either(takers)}" if takers else
                 f"no partition of {centre.name} takes a job of {error.nodes} nodes")
        text = (f"`{Path(path).name}` needs {error.nodes} nodes, but jobs on "
                f"`{centre.label(part)}`{about} use {part.most_nodes}: {where}.")
        node = nodes.container(classes=["snippet-too-many-nodes"])
        node["not_prose"] = True  # it stands for code: not in the page's reading budget
        self.state.nested_parse(StringList([text], "too many nodes"), self.content_offset, node)
        return [node, *self.tested_with(env, path)]

    def notebook(self, env, path):
        """The notebook's code cells as IPython blocks, and its download link."""
        file = snippets_dir(env) / path
        env.note_dependency(str(file))
        result, number = [], 0
        for cell in json.loads(file.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            number += 1
            code = "".join(cell["source"])
            block = nodes.literal_block(code, code, language="ipython3")
            self.set_source_info(block)
            result.append(container_wrapper(self, block, f"{Path(path).name}, cell {number}"))
        result.append(self.download_link(env, path, _target(env, path)))
        result.extend(self.tested_with(env, path))
        result.extend(self.software_notes(env, path))
        return result

    def download_link(self, env, path, target):
        name = Path(path).name
        ref = addnodes.download_reference(
            "", "", nodes.literal(name, f"Download {name}"),
            refdoc=env.docname, reftarget=target, refexplicit=True,
            reftype="download", refdomain="")
        return nodes.paragraph("", "", ref, classes=["snippet-download"])

    def tested_with(self, env, path: str) -> list:
        """A marker of the releases the snippet's tests passed on as it is now (records
        made for other content of it, or of the files it names, do not count), which
        page_range collects into the page's box; nothing is shown under the snippet."""
        env.note_dependency(str(Path(env.srcdir) / env.config.snippets_torch_versions))
        root = snippets_dir(env)
        for dependency in dependencies(path, root):  # their edits change its content
            env.note_dependency(str(root / dependency))
        records = _versions(env).get(path, {})
        found = tested_range(matching(records, content(path, root)))
        if found is None:
            text = (snippets_dir(env) / path).read_text(errors="replace")
            if re.search("torch", text, re.IGNORECASE):
                if not hasattr(env, "snippets_untested"):
                    env.snippets_untested = {}
                env.snippets_untested.setdefault(env.docname, []).append(path)
            return []
        node = tested_marker()
        node["oldest"], node["newest"], node["path"] = *found, path
        return [node]

    def software_notes(self, env, path: str) -> list:
        """Under a script that the centre's environment (``[environment] torch``) cannot
        run as it is: why, and what the reader changes (harness/software.py), in a note
        that does not count towards the page's reading budget. Nothing for a profile
        without ``torch``: the reader's own environment has everything."""
        centre = _centre(env)
        if not centre.torch:
            return []
        env.note_dependency(str(centre.path))
        from harness import software
        found = software.problems(path, centre, snippets_dir(env))
        if not found:
            return []
        if not hasattr(env, "snippets_software"):
            env.snippets_software = {}
        env.snippets_software.setdefault(env.docname, {})[path] = [p.reason for p in found]
        lines = [f"````{{admonition}} On {centre.name}", ":class: warning", ""]
        shown = env.temp_data.setdefault("software_notes", {})  # this page's: {fix: script}
        for problem in found:
            name = Path(path).name
            first = shown.setdefault((problem.fix, problem.lines), name)
            if first != name:  # the same fix as a note above: only what differs
                lines.append(f"`{name}` {problem.sentence}. {problem.again(first)}")
                continue
            link = f" ({{doc}}`/{problem.page}`)" if problem.page and not problem.lines else ""
            lines.append(f"`{name}` {problem.sentence}. {problem.fix}{link}"
                         + ("" if problem.lines else "."))
            if problem.lines:
                more = f" {{doc}}`/{problem.page}` says more." if problem.page else ""
                lines += ["", "```bash", *problem.lines, "```", "", problem.after() + more]
        lines.append("````")
        node = nodes.container()
        self.state.nested_parse(StringList(lines, "software notes"), self.content_offset, node)
        for child in node.children:
            child["not_prose"] = True
        return node.children


class SnippetOutput(Snippet):
    """Include the output captured from a real run of a snippet, below the command that
    ran it (the file's ``$`` lines), as a console session."""

    download = False

    def run(self):
        self.options.setdefault("caption", f"Output of a run ({Path(self.arguments[0]).name})")
        file = snippets_dir(self.state.document.settings.env) / self.arguments[0]
        if file.is_file() and file.read_text().startswith("$ "):
            self.options.setdefault("language", "console")
        return super().run()


class tested_marker(nodes.Invisible, nodes.Element):
    """A snippet's tested releases; removed once the page's box has them."""


class tested_box(nodes.General, nodes.Element):
    """The collapsed box of how a page was tested: a <details> element in HTML."""


class HowTested(SphinxDirective):
    """What the page says of how its snippets ran; page_range puts it in the page's box."""

    has_content = True

    def run(self):
        box = tested_box()
        self.state.nested_parse(self.content, self.content_offset, box)
        return [box]


def page_range(app, doctree):
    """The page's box under its title: the page's own words, the releases of PyTorch its
    snippets passed their tests on, and their runs on GPUs."""
    markers = list(doctree.findall(tested_marker))
    boxes = list(doctree.findall(tested_box))
    title = next(iter(doctree.findall(nodes.title)), None)
    for node in markers + boxes:
        node.parent.remove(node)
    if title is None or not (markers or boxes):
        return
    box = tested_box()
    for extra in boxes:
        box.extend(extra.children)
    ranges = {}
    for marker in markers:
        ranges.setdefault(marker["path"], (marker["oldest"], marker["newest"]))
    if ranges:
        box["summary"] = f"How this page was tested ({_page_range(ranges)})"
        box += releases(ranges)
        box += nodes.paragraph("", gpu_text(app.env, sorted(ranges)))
        centre = _centre(app.env)
        if not centre.is_default and any(path.endswith(".sbatch") for path in ranges):
            from harness import profile as profiles
            example = profiles.load(profiles.DEFAULT)
            box += nodes.paragraph("", (
                f"The job scripts on this page are shown for {centre.name}; the outputs "
                f"come from the same scripts for the guide's example cluster, with "
                f"{example.gpus_per_node} GPUs per node."))
        if centre.torch:  # the release the centre's environment gives, beside the range
            box["summary"] = (f"How this page was tested ({_page_range(ranges)}; "
                              f"{centre.name} gives {centre.torch})")
            from harness import software
            root = snippets_dir(app.env)
            stopped = {path: found[0].reason for path in ranges
                       if (found := software.problems(path, centre, root))}
            box += nodes.paragraph("", centre_text(centre, ranges, stopped))
    else:
        box["summary"] = "How this page was tested"
    title.parent.insert(title.parent.index(title) + 1, box)


def _page_range(ranges: dict) -> str:
    """The releases every snippet passed on, as "PyTorch A to B"; where no release is
    common to all, the span of them all, "by script"."""
    oldest = max((r[0] for r in ranges.values()), key=_key)
    newest = min((r[1] for r in ranges.values()), key=_key)
    if _key(oldest) <= _key(newest):
        return _range_text(oldest, newest)
    return _range_text(min((r[0] for r in ranges.values()), key=_key),
                       max((r[1] for r in ranges.values()), key=_key)) + ", by script"


def releases(ranges: dict) -> list:
    """A sentence for one range, else one item per script."""
    if len(set(ranges.values())) == 1:
        text = _range_text(*next(iter(ranges.values())))
        which = "the script" if len(ranges) == 1 else f"all {len(ranges)} scripts"
        return [nodes.paragraph("", f"The tests of {which} on this page passed with {text}.")]
    items = nodes.bullet_list()
    for path, found in ranges.items():  # in the order the page shows them
        items += nodes.list_item("", nodes.paragraph("", f"{Path(path).name}: {_range_text(*found)}"))
    return [nodes.paragraph("", "The tests of the scripts on this page passed with these "
                                "releases of PyTorch:"), items]


def centre_text(centre, ranges: dict, stopped: dict) -> str:
    """What the release of the centre's environment means for the page's scripts: those
    it cannot run as they are (``stopped``: {path: why}), and those whose tests have not
    run on it."""
    release = centre.torch
    outside = [Path(path).name for path, (oldest, newest) in ranges.items()
               if path not in stopped and not _key(oldest) <= _key(release) <= _key(newest)]
    text = f"The environment of {centre.name} gives PyTorch {release}"
    if not outside and not stopped:
        return f"{text}, within the range of every script on this page."
    parts = []
    if outside:
        parts.append(f"the tests of {_names(outside)} have not run with it yet")
    if stopped:
        parts.append("it cannot run " + _names([f"{Path(path).name} ({why})"
                                                for path, why in stopped.items()])
                     + (" as it is" if len(stopped) == 1 else " as they are"))
    return f"{text}: {'; '.join(parts)}."


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def visit_box(self, node):
    self.body.append(f'<details class="how-tested"><summary>{self.encode(node["summary"])}'
                     "</summary>\n")


def depart_box(self, node):
    self.body.append("</details>\n")


def skip_summary(self, node):
    """Other builders: the box's contents, without the summary."""


class FromRun(SphinxRole):
    """{from-run}`path: regex`: the regex's group in the first matching line of the output.

    Rule: A `{from-run}` figure matches a line of its captured output, with one group.
    Fix: change the pattern, or the sentence, to what the output now prints."""

    def run(self):
        path, _, pattern = self.text.partition(":")
        file = snippets_dir(self.env) / path.strip()
        self.env.note_dependency(str(file))
        where = self.get_location()
        if not file.is_file():
            logger.warning("from-run: no captured output %s", path.strip(), location=where,
                           type="snippets", subtype="from-run")
            return [nodes.inline(self.rawtext, self.text)], []
        match = re.search(pattern.strip(), file.read_text(), re.MULTILINE)
        if match is None or match.lastindex != 1:
            logger.warning("from-run: no line of %s matches %r with one group: the sentence "
                           "no longer says what the run printed", path.strip(), pattern.strip(),
                           location=where, type="snippets", subtype="from-run")
            return [nodes.inline(self.rawtext, self.text)], []
        return [nodes.inline(self.rawtext, match[1], classes=["from-run"])], []


def gpu_text(env, paths: list[str]) -> str:
    """Which of the page's scripts have run on GPUs, on which and when: from the record
    of GPU runs, and "not yet" for the others."""
    path = Path(env.srcdir) / env.config.snippets_gpu_runs
    env.note_dependency(str(path))
    record = json.loads(path.read_text()) if path.is_file() else {}
    ran = {p: record[p] for p in paths if ran_on_gpus(record.get(p))}
    if not ran:
        return ("The script on this page has not run on GPUs yet." if len(paths) == 1 else
                "The scripts on this page have not run on GPUs yet.")
    runs = {}
    for p, run in ran.items():
        runs.setdefault((run["gpus"], run["torch"], run["date"]), []).append(Path(p).name)
    text = "; ".join(f"{', '.join(names)} on {gpus} with PyTorch {torch} ({date})"
                     for (gpus, torch, date), names in sorted(runs.items()))
    rest = ("" if len(ran) == len(paths) else
            " The other script has not run on GPUs yet." if len(paths) - len(ran) == 1 else
            " The other scripts have not run on GPUs yet.")
    return f"Run on GPUs: {text}.{rest}"


def purge(app, env, docname):
    getattr(env, "snippets_untested", {}).pop(docname, None)
    getattr(env, "snippets_software", {}).pop(docname, None)


def merge(app, env, docnames, other):
    for name in ("snippets_untested", "snippets_software"):
        if not hasattr(env, name):
            setattr(env, name, {})
        getattr(env, name).update(getattr(other, name, {}))


def software_summary(app, exception):
    """One line at the end of the build (information, not a warning): how many of the
    scripts the pages show the centre's environment cannot run as they are, and the
    command that lists them."""
    if exception is not None:
        return
    centre = _centre(app.env)
    found = {path for paths in getattr(app.env, "snippets_software", {}).values()
             for path in paths}
    if centre.torch and found:
        logger.info("The environment of %s (PyTorch %s) cannot run %d of the scripts the "
                    "pages show as they are (each has a note under it): python -m "
                    "harness.software %s lists them", centre.name, centre.torch, len(found),
                    os.path.relpath(centre.path, Path(app.srcdir).parent))


def check_tested(app, env):
    """One error (with -W, as the Makefile builds, a failed build) naming every snippet that
    uses PyTorch and has no release its tests passed on as it is now, with the command
    that records one.

    Rule: Every snippet that uses PyTorch has a release its tests passed on, recorded for
    its content now. Fix: `make check SNIPPET=<chapter>/<name>.py`."""
    untested = getattr(env, "snippets_untested", {})
    if untested:
        where = "; ".join(f"{path} (on {doc}): make check SNIPPET={path}"
                          for doc, paths in sorted(untested.items())
                          for path in dict.fromkeys(paths))
        logger.error("%s has no tested PyTorch release for the content now of %s (the "
                     "command reruns the snippet's tests and records the release they pass "
                     "on)", env.config.snippets_torch_versions, where,
                     type="snippets", subtype="untested")


def check_coverage(app, env):
    """Rule: Every file under `snippets/` is shown on a page, and offered for download
    there (an excerpt offers none: show the whole file too, in a dropdown if need be).
    Fix: show it with a `{snippet}` directive (`{snippet-output}` for a `.out`), or
    delete it."""
    root = snippets_dir(env)
    src = Path(env.srcdir)
    included = {(src / dep).resolve() for deps in env.dependencies.values() for dep in deps}
    rendered = rendered_dir(env).resolve()
    downloadable = set()
    for name in env.dlfiles:
        path = (src / name).resolve()
        if path.is_relative_to(rendered):  # a job script, as the profile renders it
            rel = path.relative_to(rendered)
            path = root / (Path(*rel.parts[2:]) if rel.parts[0] == PARTITIONS else rel)
        downloadable.add(path)
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.name.startswith("."):
            continue
        rel = path.relative_to(root.parent)
        if path not in included:
            logger.warning("%s is not shown on any page", rel, type="snippets", subtype="unused")
        elif (path.suffix != ".out" and path not in downloadable
              and not (path.suffix == ".sbatch" and runs_nowhere(env, path))):
            logger.warning("%s is not offered for download on any page", rel,
                           type="snippets", subtype="unused")


def setup(app):
    app.add_config_value("snippets_dir", "../snippets", "env")
    app.add_config_value("centre", "", "env")  # the centre profile's path; "": the default
    app.add_directive("snippet", Snippet)
    app.add_directive("snippet-output", SnippetOutput)
    app.add_directive("how-tested", HowTested)
    app.add_role("from-run", FromRun())
    app.add_node(tested_marker)
    app.add_node(tested_box, html=(visit_box, depart_box),
                 **{b: (skip_summary, skip_summary) for b in ("latex", "text", "man", "texinfo")})
    app.add_config_value("snippets_torch_versions", "_data/torch_versions.json", "env")
    app.add_config_value("snippets_gpu_runs", "_data/gpu_runs.json", "env")
    app.connect("doctree-read", page_range)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.connect("env-check-consistency", check_coverage)
    app.connect("env-check-consistency", check_tested)
    app.connect("build-finished", software_summary)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
