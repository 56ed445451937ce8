"""Lesson furniture: Overview, Objectives and Key points boxes, and the table of lessons.

A lesson is a page with Objectives. Its minutes are computed from its prose and its
unfolded code as its doctree has them (reading.py), never typed; ``lesson-table`` lists
every lesson in table-of-contents order with its minutes, so the landing page's table
cannot disagree with the pages. A lesson over the reading budget is a build warning
(with -W, as the Makefile builds, an error). Glossary links are checked without a build
(tests/site/test_pages.py).
"""

import reading
from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.parsers.rst.directives.admonitions import BaseAdmonition
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _admonition(title: str, css: str):
    class Box(BaseAdmonition):
        node_class = nodes.admonition
        required_arguments = 0

        def run(self):
            self.arguments = [title]
            self.options["class"] = [css]
            return super().run()

    Box.__name__ = css.title()
    return Box


class lesson_table(nodes.General, nodes.Element):
    """Placeholder replaced once every page's metadata is known."""


class LessonTable(Directive):
    def run(self):
        return [lesson_table()]


def measure(app, doctree):
    """A lesson's minutes into its metadata; its reading budget checked.

    Rule: A lesson (a page with Objectives) has at most 1,250 words of prose, counted on
    its doctree without code, folded parts or the how-tested box. Fix: cut the page, or
    split it in two; `make html` prints the count."""
    env = app.env
    if not any("objectives" in n["classes"] for n in doctree.findall(nodes.admonition)):
        return
    env.metadata[env.docname]["minutes"] = reading.minutes(doctree)
    count = reading.words(doctree)
    if count > reading.BUDGET:
        logger.warning("%d words of prose, over the budget of %d: cut the page or split it "
                       "in two (make html shows the count)", count, reading.BUDGET,
                       location=env.docname, type="lesson", subtype="budget")


def _docs_in_order(env, doc, seen):
    for child in env.toctree_includes.get(doc, []):
        if child not in seen:
            seen.append(child)
            _docs_in_order(env, child, seen)
    return seen


def fill_tables(app, doctree, docname):
    env = app.env
    for placeholder in doctree.findall(lesson_table):
        table = nodes.table(classes=["lesson-table"])
        group = nodes.tgroup(cols=2)
        table += group
        group += [nodes.colspec(colwidth=4), nodes.colspec(colwidth=1)]
        group += nodes.thead("", _row(nodes.Text("Lesson"), nodes.Text("Minutes")))
        body = nodes.tbody()
        total = 0
        for doc in _docs_in_order(env, env.config.root_doc, []):
            minutes = env.metadata.get(doc, {}).get("minutes")
            if minutes is None:
                continue
            total += int(minutes)
            ref = nodes.reference("", "", internal=True,
                                  refuri=app.builder.get_relative_uri(docname, doc))
            ref += nodes.Text(env.titles[doc].astext())
            body += _row(ref, nodes.Text(str(minutes)))
        body += _row(nodes.strong("", "Total"), nodes.strong("", str(total)))
        group += body
        placeholder.replace_self(table)


def _row(*cells):
    row = nodes.row()
    for cell in cells:
        row += nodes.entry("", nodes.paragraph("", "", cell))
    return row


def root_is_outdated(app, env, added, changed, removed):
    return [env.config.root_doc] if added or changed or removed else []


def setup(app):
    app.add_directive("overview", _admonition("Overview", "overview"))
    app.add_directive("objectives", _admonition("Objectives", "objectives"))
    app.add_directive("keypoints", _admonition("Key points", "keypoints"))
    app.add_node(lesson_table)
    app.add_directive("lesson-table", LessonTable)
    app.connect("doctree-read", measure)
    app.connect("doctree-resolved", fill_tables)
    app.connect("env-get-outdated", root_is_outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
