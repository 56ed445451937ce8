"""Every block of code a reader can copy comes from a tested file, and what the pages say of
those files holds.

- A page shows code of a runnable or configuration language only with ``{snippet}`` (a
  whole file or an excerpt), never as a fenced block written into the page; the few blocks
  no test runs are sketches: a ``{code-block}`` captioned SKETCH_CAPTION, each listed in
  SKETCHES with why. A snippet shows lines of a file by their text (``:pyobject:``,
  ``:start-at:``, ``:end-at:`` ...), never by their numbers (``:lines:``), which an edit
  of the file shifts.
- A ``text`` block is output, not code. Where a captured output holds its lines, the page
  shows them from that file with ``{snippet-output}``.
- A console command that runs a snippet names a file in snippets/, and every ``--option``
  after the file's name is one the file defines.
- Inline code on a page that shows snippets, ``name()`` or ``--option``, names what one of
  the page's snippets defines or uses, an API that resolves, or an entry of NAMED.

Pages are read with markdown-it-py as MyST configures it; directives' contents are read
as Markdown too, so blocks inside exercises, tabs and notes count.
"""

import functools
import importlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.launch import ROOT, SNIPPETS

pytest.importorskip("myst_parser", reason="needs MyST (requirements.txt)")
from markdown_it.renderer import RendererHTML  # noqa: E402
from myst_parser.config.main import MdParserConfig  # noqa: E402
from myst_parser.parsers.mdit import create_md_parser  # noqa: E402

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if not {"_build", "_data"} & set(p.parts))
PARSER = create_md_parser(MdParserConfig(enable_extensions={
    "colon_fence", "deflist", "attrs_inline", "substitution"}), RendererHTML)

#: Languages a reader runs or configures with: a block of one comes from a tested file.
RUNNABLE = {"python", "py", "python3", "ipython", "ipython3", "pycon", "bash", "sh", "shell",
            "zsh", "json", "yaml", "yml", "toml"}
#: Directives that write a code block into a page, as a fence does.
CODE_DIRECTIVES = {"code-block", "code", "sourcecode"}
#: What a sketch tells the reader, as its caption.
SKETCH_CAPTION = "Sketch: not a tested script"

#: The sketches: (page, first line of code) and why no test runs the lines.
SKETCHES = {
    ("performance/compile_ddp.md", "export TORCHINDUCTOR_CACHE_DIR=/scratch/$USER/"
                                   "inductor-cache"):
        "a line to add to the reader's own job script, with a folder of their own",
    ("model_parallel/pipeline.md", "class Net(nn.Sequential):"):
        "the other way to mark a split, which the page names; pipeline_traced.py uses "
        "split_spec",
    ("performance/channels_last.md", "torch.backends.cudnn.allow_tf32 = False        # "
                                     "convolutions"):
        "two settings for comparing with float32 on GPUs; channels_last.py keeps the "
        "defaults",
    ("frameworks/tensorflow.md", '{"cluster": {"worker": ["node1:12345", "node2:12345"]},'):
        "the format of TF_CONFIG for two named nodes; tf_multiworker.py writes it under Slurm",
    ("frameworks/tensorflow.md", '{"cluster": {"worker": ["gpu07:12345", "gpu08:12345", '
                                 '"gpu09:12345"]},'):
        "an exercise's answer: a value of TF_CONFIG for three named nodes",
    ("frameworks/tensorflow.md",
     "resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(port_base=12345)"):
        "an alternative the page names and does not use: it needs GPU nodes",
    ("frameworks/accelerate.md", "accelerator = Accelerator(cpu=not torch.cuda.is_available(), "
                                 "gradient_accumulation_steps=4)"):
        "an exercise's answer: the lines of accelerate_train.py it changes",
    ("slurm/environment.md", "#!/bin/bash"):
        "a Jupyter job: the tests install no JupyterLab, so no test runs it yet",
    ("slurm/hardware.md", "#SBATCH --qos=short"):
        "one line whose value is the cluster's own: no cluster has the same QOS names",
}


@dataclass
class Block:
    """A fenced block: a directive's (``name`` "snippet", ``language`` its argument) or
    code's (``name`` "", ``language`` its info), its text and the page's first line of it."""

    name: str
    language: str
    text: str
    line: int


def blocks(markdown: str, offset: int = 0):
    """Every fenced block of a page, the contents of directives read as Markdown too."""
    for token in PARSER.parse(markdown):
        if token.type not in ("fence", "colon_fence"):
            continue
        line = offset + token.map[0] + 1
        directive = re.match(r"\{([\w-]+)\}\s*(.*)", token.info.strip())
        if directive is None:
            yield Block("", token.info.strip().split(" ")[0], token.content, line)
            continue
        name, argument = directive.groups()
        yield Block(name, argument.strip(), token.content, line)
        if name not in CODE_DIRECTIVES | {"snippet", "snippet-output"}:
            yield from blocks(token.content, line)


def name(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines()
                 if line.strip() and not re.match(r"\s*:[\w-]+:", line)), "")


def sketches(markdown: str):
    """The page's code blocks of a runnable language written with a directive."""
    return [b for b in blocks(markdown) if b.name in CODE_DIRECTIVES
            and b.language.split(" ")[0].lower() in RUNNABLE]


@functools.cache
def outputs() -> dict[str, str]:
    return {p.relative_to(SNIPPETS).as_posix(): p.read_text(errors="replace")
            for p in sorted(SNIPPETS.rglob("*.out"))}


def captured(text: str) -> str | None:
    """The captured output that holds every line of ``text``, if one does."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((path for path, out in outputs().items()
                 if lines and all(line in out for line in lines)), None)


def unsourced(page: str, markdown: str) -> list[str]:
    """The page's code blocks that come from no tested file, each with its fix."""
    problems = []
    for block in blocks(markdown):
        language = block.language.split(" ")[0].lower()
        if block.name == "" and language in RUNNABLE:
            problems.append(
                f"{page}:{block.line}: a {language} block written into the page: show it from "
                "its snippet, {snippet} with :pyobject: or :start-at:/:end-at: on lines of "
                "the file (add a comment marker if none fits), or, if no test can run it, "
                f"make it a sketch: {{code-block}} {language} with :caption: {SKETCH_CAPTION}"
                ", listed in SKETCHES of tests/site/test_code_blocks.py with why")
        elif block.name == "" and language in ("", "text") and captured(block.text):
            problems.append(
                f"{page}:{block.line}: output copied into the page from "
                f"{captured(block.text)}: show it with {{snippet-output}} and "
                ":start-at:/:end-at:")
        elif block.name in ("snippet", "snippet-output") and re.search(
                r"^:lines:", block.text, re.M):
            problems.append(f"{page}:{block.line}: :lines: picks lines by number, which an "
                            "edit shifts: use :pyobject: or :start-at:/:end-at:")
    for block in sketches(markdown):
        if f":caption: {SKETCH_CAPTION}\n" not in block.text:
            problems.append(f"{page}:{block.line}: a sketch without the caption "
                            f"{SKETCH_CAPTION!r}: give it that :caption:")
        if (page, first_line(block.text)) not in SKETCHES:
            problems.append(f"{page}:{block.line}: a sketch not listed in SKETCHES of "
                            "tests/site/test_code_blocks.py: list it with why no test runs it")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_code_block_comes_from_a_tested_file(page):
    """Rule: Every fenced code block of a runnable language (python, bash, json ...)
    on a page comes from a tested file. Fix: show it with `{snippet}` and `:pyobject:` or
    `:start-at:`/`:end-at:` (add a comment marker to the snippet if nothing fits), or
    caption a sketch "Sketch: not a tested script" and list it in `SKETCHES` with why."""
    assert unsourced(name(page), page.read_text()) == []


def test_every_listed_sketch_is_on_its_page():
    shown = {(name(p), first_line(b.text)) for p in PAGES for b in sketches(p.read_text())}
    assert set(SKETCHES) - shown == set(), "remove what no page shows from SKETCHES"


def test_a_block_written_into_a_page_or_an_unlisted_sketch_fails():
    caption = f":caption: {SKETCH_CAPTION}\n"
    page = ("Text.\n\n````{solution} x\n```python\nprint(1)\n```\n````\n\n"
            f"```{{code-block}} python\n{caption}model = Net()\n```\n\n"
            "```{code-block} yaml\na: 1\n```\n\n"
            "```{snippet} ddp/train.py\n:pyobject: main\n```\n\n```console\n$ ls\n```\n\n"
            "```text\nAttributeError: Can't get attribute 'train_here'\n```\n\n"
            "```text\nAn error no run printed\n```\n\n"
            "```{snippet} ddp/train.py\n:lines: 3-5\n```\n")
    problems = [p.split(": ", 1)[1][:20] for p in unsourced("x.md", page)]
    assert problems == ["a python block writt", "output copied into t", ":lines: picks lines ",
                        "a sketch not listed ", "a sketch without the", "a sketch not listed "
                        ], problems
    listed = f"```{{code-block}} bash\n{caption}#SBATCH --qos=short\n```\n"
    assert unsourced("slurm/hardware.md", listed) == []


# Console commands ------------------------------------------------------------------------

#: A command's prompt: "$ ", or a machine's name before it ("node0$ ").
PROMPT = re.compile(r"^(?:[\w.-]+)?\$ (.*)$")
SCRIPT = re.compile(r"[\w.-]+\.(py|sbatch|sh|ipynb)$")
SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


def commands(console: str):
    """A console block's commands, a command continued on the next lines (a trailing
    backslash, an open quote) joined into one."""
    pending = None
    for line in console.splitlines():
        prompt = PROMPT.match(line)
        if pending is None and prompt is None:
            continue  # output
        pending = prompt[1] if pending is None else f"{pending}\n{line}"
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            words = list(shlex.shlex(pending, posix=True, punctuation_chars="|&;<>"))
        except ValueError:  # an open quote: the command goes on
            continue
        pending = None
        yield [w.replace("\n", " ") for w in words]


def snippets_named(file: str, page_files: list[Path]) -> list[Path]:
    """The page's snippet of that name, else every one of that name."""
    mine = [p for p in page_files if p.name == file]
    return mine[:1] or sorted(p for p in SNIPPETS.rglob(file) if p.is_file())


def page_snippets(markdown: str) -> list[Path]:
    return [SNIPPETS / b.language for b in blocks(markdown)
            if b.name in ("snippet", "snippet-output") and (SNIPPETS / b.language).is_file()]


def wrong_commands(page: str, markdown: str) -> list[str]:
    """Commands of the page's console blocks that run a snippet missing from snippets/ or
    give it an option it does not define."""
    files = page_snippets(markdown)
    problems = []
    for block in blocks(markdown):
        if block.name != "" or block.language != "console":
            continue
        for words in commands(block.text):
            for i, word in enumerate(words):
                if word in SEPARATORS:
                    break
                if "$" in word or not SCRIPT.fullmatch(Path(word).name):
                    continue
                scripts = snippets_named(Path(word).name, files)
                if not scripts:
                    problems.append(f"{page}:{block.line}: {word} is no snippet in snippets/: "
                                    "correct the name, or add the file with its test")
                    break
                texts = [script.read_text(errors="replace") for script in scripts]
                for option in words[i + 1:]:
                    if option in SEPARATORS:
                        break
                    option = option.split("=")[0]
                    if option.startswith("--") and not any(re.search(
                            re.escape(option) + r"(?![\w-])", text) for text in texts):
                        problems.append(f"{page}:{block.line}: {scripts[0].name} defines no "
                                        f"{option}: correct the command or the script")
                break
    return problems


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_command_runs_a_snippet_with_its_own_options(page):
    """Rule: A command on a page that runs a snippet names a file in `snippets/`, with
    options the file defines. Fix: correct the command, or the snippet's options."""
    assert wrong_commands(name(page), page.read_text()) == []


def test_a_missing_script_or_an_unknown_option_fails():
    page = ("```console\n$ torchrun --nproc_per_node=2 train.py --epochs 3 --no-such 1\n"
            "$ python nowhere.py\nnode1$ TF_CONFIG='{\"a\":\n  1}' python train_spawn.py "
            "--bogus | tee log\n```\n\n```{snippet} ddp/train.py\n```\n")
    assert [p.split(": ", 1)[1].split(":")[0] for p in wrong_commands("x.md", page)] == [
        "train.py defines no --no-such", "nowhere.py is no snippet in snippets/",
        "train_spawn.py defines no --bogus"]


# Names in prose -----------------------------------------------------------------------------

#: Names pages use for modules and objects, as the snippets name them.
ALIASES = {"dist": "torch.distributed", "nn": "torch.nn", "F": "torch.nn.functional",
           "torch": "torch", "mp": "torch.multiprocessing", "os": "os",
           "model": "torch.nn.parallel.DistributedDataParallel", "net": "torch.nn.Module",
           "module": "torch.nn.Module", "optimizer": "torch.optim.Optimizer",
           "parser": "argparse.ArgumentParser", "p.grad": "torch.distributed.tensor.DTensor",
           "FSDP": "torch.distributed.fsdp.FullyShardedDataParallel"}
#: Where a name without a dot is looked up.
BARE = ["builtins", "torch", "torch.cuda", "torch.distributed", "torch.distributed.tensor",
        "torch.distributed.pipelining", "torch.nn.parallel.DistributedDataParallel",
        "torch.distributed.tensor.DTensor"]
#: Names in inline code that neither a snippet of the page nor an import resolves, and why.
NAMED = {
    **dict.fromkeys(
        ["--kill-on-bad-exit", "--overlap", "--nodelist", "--jobid", "--cpu-bind",
         "--gpu-bind", "--mem", "--mem-per-gpu", "--mem-per-cpu", "--qos", "--chdir",
         "--gpus", "--gpus-per-task", "--gpus-per-node", "--exclusive", "--batch"],
        "an option of Slurm's srun, sbatch or scancel, which the page explains"),
    "--use-env": "the option of torch.distributed.launch the page tells readers to drop",
    "--use_env": "the option of torch.distributed.launch the page tells readers to drop",
    "--nv": "Apptainer's option that gives a container the GPUs",
    "--cpu": "accelerate launch's option, which the page explains",
    "--gloo": "horovodrun's option, which the page explains",
    "--subprocesses": "py-spy's option, which the page explains",
    "--batch-size": "train.py's option, which concepts.md names before the script is shown",
}


def attribute(path: str):
    """The object at a dotted path of modules and attributes, or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        return found
    return None


def resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` is an attribute path from a module or object (through ALIASES), or
    a name without a dot is one of BARE's."""
    if "." not in dotted:
        return any(attribute(f"{where}.{dotted}") is not None for where in BARE)
    head = max((a for a in ALIASES if dotted.startswith(a + ".")), key=len, default=None)
    return head is not None and attribute(ALIASES[head] + dotted[len(head):]) is not None


@functools.cache
def launcher_options() -> set[str]:
    """The options of torchrun and of the launcher before it, as their parsers define them."""
    from torch.distributed import launch, run
    return {option for parser in (run.get_args_parser(), launch.get_args_parser())
            for action in parser._actions for option in action.option_strings}


def inline_code(markdown: str):
    """The inline code spans of the page's prose, directives' contents included."""
    def spans(tokens):
        for token in tokens:
            if token.type == "code_inline":
                yield token.content
            yield from spans(token.children or [])
    yield from spans(PARSER.parse(markdown))
    for block in blocks(markdown):
        if block.name and block.name not in CODE_DIRECTIVES | {"snippet", "snippet-output"}:
            yield from spans(PARSER.parse(block.text))


CALL = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\((\.\.\.)?\)")
OPTION = re.compile(r"(?P<name>--[\w-]+)(=\S*)?")


def unknown_names(page: str, markdown: str, files: list[Path] | None = None) -> list[str]:
    """Inline ``name()`` and ``--option`` that no snippet of the page defines or uses, that
    no import resolves and that NAMED does not list."""
    files = page_snippets(markdown) if files is None else files
    texts = [f.read_text(errors="replace") for f in files if f.suffix != ".out"]
    if not texts:
        return []
    problems = []
    for span in dict.fromkeys(inline_code(markdown)):
        call, option = CALL.fullmatch(span), OPTION.fullmatch(span)
        if call:
            found = call["name"]
            last = re.escape(found.rsplit(".", 1)[-1])
            pattern = rf"(def|class)\s+{last}\b|\b{last}\("  # defined, called or imported
        elif option:
            found, pattern = option["name"], re.escape(option["name"]) + r"(?![\w-])"
        else:
            continue
        if any(re.search(pattern, t) for t in texts) or found in NAMED or (
                resolves(found) if call else found in launcher_options()):
            continue
        problems.append(f"{page}: `{span}` is in none of the page's snippets: correct the "
                        "name, or list it in NAMED of tests/site/test_code_blocks.py with why")
    return problems


def wrong_captions(page: str, markdown: str) -> list[str]:
    """Functions a snippet's caption names, "train.py (in setup)" or "(launcher_env)", that
    its file does not define."""
    problems = []
    for block in blocks(markdown):
        caption = re.search(r"^:caption: .*?\((.*)\)\s*$", block.text, re.M)
        path = SNIPPETS / block.language
        if block.name != "snippet" or caption is None or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for found in re.findall(r"\bin (\w+)|\b(\w*_\w*)\b", caption[1]):
            function = found[0] or found[1]
            if not re.search(rf"^\s*(def|class) {function}\b", text, re.M):
                problems.append(f"{page}:{block.line}: the caption names {function}, which "
                                f"{block.language} does not define: correct the caption")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_captions_name_what_the_snippet_defines(page):
    """Rule: A function a snippet's caption names is defined in that file. Fix: rename
    it in the caption after the snippet."""
    assert wrong_captions(name(page), page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_names_in_prose_are_the_snippets_own(page):
    """Rule: Inline code `name()` or `--option` on a page that shows snippets names what
    one of its snippets defines or uses, or an API that imports. Fix: rename it after the
    snippet, or list it in `NAMED` with why."""
    assert unknown_names(name(page), page.read_text()) == []


def test_a_renamed_function_fails_its_page(tmp_path):
    original = SNIPPETS / "slurm" / "train.py"
    renamed = tmp_path / "train.py"
    renamed.write_text(original.read_text().replace("def request_stop(", "def ask_to_stop("))
    page = ("The handler `request_stop()` sets a flag; `dist.all_reduce()` and `print()` "
            "resolve, and `--checkpoint` is an option of the script.\n")
    assert unknown_names("x.md", page, [original]) == []
    caption = ("```{snippet} slurm/train.py\n:pyobject: request_stop\n"
               ":caption: train.py (request_stop)\n```\n")
    assert wrong_captions("x.md", caption) == []
    assert wrong_captions("x.md", caption.replace("(request_stop)", "(ask_to_stop)")) == [
        "x.md:1: the caption names ask_to_stop, which slurm/train.py does not define: "
        "correct the caption"]
    assert unknown_names("x.md", page, [renamed]) == [
        "x.md: `request_stop()` is in none of the page's snippets: correct the name, or list "
        "it in NAMED of tests/site/test_code_blocks.py with why"]
