"""Sphinx extension: ``diagram`` draws one of the figures of diagram_figures.py at build time.

    ```{diagram} ring-allreduce
    :caption: A ring all-reduce over 4 ranks.
    ```

In HTML the figure is inline SVG drawn in the page's text colour (so it follows the
light and dark themes), named for screen readers by its alt text, which diagram_figures.py
writes next to the drawing. Other builders get the alt text as a paragraph.
"""

import sys

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from diagram_figures import FIGURES


class Diagram(SphinxDirective):
    required_arguments = 1
    option_spec = {"caption": directives.unchanged}

    def run(self):
        name = self.arguments[0]
        if name not in FIGURES:
            raise self.error(f"no diagram {name!r}; known: {', '.join(sorted(FIGURES))}")
        for module in ("diagram_figures", "diagram_svg"):  # rebuild pages when a drawing changes
            self.env.note_dependency(sys.modules[module].__file__)
        drawing, alt = FIGURES[name]()
        figure = nodes.figure(classes=["diagram"])
        figure += nodes.raw("", drawing.svg(name, alt), format="html")
        figure += nodes.paragraph("", alt, classes=["diagram-alt", "only-text"])
        if "caption" in self.options:
            caption, _ = self.state.inline_text(self.options["caption"], self.lineno)
            figure += nodes.caption(self.options["caption"], "", *caption)
        return [figure]


def drop_alt_in_html(app, doctree, docname):
    """HTML shows the SVG, whose title is the alt text: do not repeat it."""
    if app.builder.format == "html":
        for node in list(doctree.findall(nodes.paragraph)):
            if "diagram-alt" in node["classes"]:
                node.parent.remove(node)


def setup(app):
    app.add_directive("diagram", Diagram)
    app.connect("doctree-resolved", drop_alt_in_html)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
