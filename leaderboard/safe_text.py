"""Record text made safe for terminals and markdown (record text comes from strangers' files).

:func:`plain` is for terminals and logs: one line, with every control character (ANSI escape
sequences start with ESC), line and paragraph separators and bidirectional overrides replaced
by ``?``, so a compressor name cannot move the cursor, recolour or clear the screen, fake a line
of output or reverse the text around it. :func:`markdown_cell` is for a markdown table cell:
:func:`plain`, then HTML-significant characters as entities (``<script>`` shows as text) and
markdown's inline markup characters backslash-escaped (no emphasis, links, code or extra
columns); a heading cannot start because the text stays inside one table row.
"""

from __future__ import annotations

import re

__all__ = ["plain", "markdown_cell"]

_SPACE = re.compile(r"[\t\n\r\v\f\u0085\u2028\u2029]+")
# C0 and C1 controls, DEL, zero-width and bidirectional formatting characters
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def plain(text: object, limit: int = 2000) -> str:
    """``text`` as one line of printable characters (see the module docstring), at most ``limit`` long."""
    s = _CONTROL.sub("?", _SPACE.sub(" ", str(text)))
    return s if len(s) <= limit else s[: limit - 3] + "..."


def markdown_cell(text: object) -> str:
    """``text`` for one cell of a markdown table: inert (see the module docstring)."""
    s = plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)
