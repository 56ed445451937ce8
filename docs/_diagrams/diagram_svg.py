"""A very small SVG writer for the guide's diagrams.

Lines and text use ``currentColor``, the colour of the page's text, and fills are
tints with some transparency, so an inline diagram reads in light and in dark mode.
"""

from __future__ import annotations

from html import escape

#: Tints, by what they stand for; drawn at FILL_OPACITY over the page's background.
COLOURS = {"blue": "#4f6bed", "orange": "#e8871e", "green": "#2e9e5b", "purple": "#9b59b6",
           "grey": "#888888", "red": "#d64545"}
FILL_OPACITY = 0.28


class Drawing:
    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self.items: list[str] = []

    def rect(self, x, y, w, h, colour=None, rx=4, dashed=False, stroke=True):
        fill = (f'fill="{COLOURS[colour]}" fill-opacity="{FILL_OPACITY}"' if colour
                else 'fill="none"')
        line = 'stroke="currentColor" stroke-width="1.2"' if stroke else 'stroke="none"'
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        self.items.append(f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" '
                          f'rx="{rx}" {fill} {line}{dash}/>')

    def text(self, x, y, content, size=12, anchor="middle", bold=False, italic=False):
        weight = ' font-weight="bold"' if bold else ""
        style = ' font-style="italic"' if italic else ""
        self.items.append(f'<text x="{x:g}" y="{y:g}" font-size="{size}" text-anchor="{anchor}" '
                          f'dominant-baseline="middle" fill="currentColor"{weight}{style}>'
                          f"{escape(str(content))}</text>")

    def line(self, x1, y1, x2, y2, arrow=True, dashed=False):
        head = ' marker-end="url(#arrow)"' if arrow else ""
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        self.items.append(f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" '
                          f'stroke="currentColor" stroke-width="1.2"{dash}{head}/>')

    def path(self, d, arrow=True):
        head = ' marker-end="url(#arrow)"' if arrow else ""
        self.items.append(f'<path d="{d}" fill="none" stroke="currentColor" '
                          f'stroke-width="1.2"{head}/>')

    def svg(self, name: str, alt: str) -> str:
        """The drawing as inline SVG, named by its alt text for assistive technology."""
        title = f"diagram-{name}-title"
        items = "".join(self.items).replace("url(#arrow)", f"url(#arrow-{name})")
        return (f'<svg class="diagram" viewBox="0 0 {self.width:g} {self.height:g}" '
                f'width="{self.width:g}" role="img" aria-labelledby="{title}" '
                f'xmlns="http://www.w3.org/2000/svg">'
                f'<title id="{title}">{escape(alt)}</title>'
                f'<defs><marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" '
                'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                '<path d="M 0 0 L 10 5 L 0 10 z" fill="currentColor"/></marker></defs>'
                + items + "</svg>")
