"""Record text made safe for terminals and markdown (record text comes from strangers' files).

:func:`plain` is for terminals and logs: one line, with every control character (ANSI escape
sequences start with ESC), line and paragraph separators and bidirectional overrides replaced
by ``?``, so a compressor name cannot move the cursor, recolour or clear the screen, fake a line
of output or reverse the text around it. :func:`markdown_cell` is for a markdown table cell:
:func:`plain`, then HTML-significant characters as entities (``<script>`` shows as text) and
markdown's inline markup characters backslash-escaped (no emphasis, links, code or extra
columns), and what a markdown renderer would turn into a link by itself (a bare ``https://...``,
``www....`` or ``name@host``) broken by a zero-width space, so untrusted text shows as plain text (issue
45); a heading cannot start because the text stays inside one table row.

:func:`skeleton` is how a name looks, for look-alike checks: the Unicode confusables skeleton of UTS #39
(NFD, each character mapped to its prototype, NFD again), over a small table of the confusables that
matter for ASCII names (Cyrillic, Greek, Cherokee, Latin small capitals and dotless letters, digits that
read as letters), after NFKC (full-width and mathematical letters) and case folding, with invisible and
bidirectional formatting characters removed.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["plain", "markdown_cell", "skeleton", "table_text"]

_SPACE = re.compile(r"[\t\n\r\v\f\u0085\u2028\u2029]+")
# C0 and C1 controls, DEL, zero-width and bidirectional formatting characters
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
# what GitHub-flavoured markdown (and Streamlit's renderer) links without being asked: a scheme's "://",
# "www." and an e-mail's "@"; a zero-width space inside each keeps the text as it reads
_AUTOLINK = re.compile(r"(?i)(://|www\.|@)")


def plain(text: object, limit: int = 2000) -> str:
    """``text`` as one line of printable characters (see the module docstring), at most ``limit`` long."""
    s = _CONTROL.sub("?", _SPACE.sub(" ", str(text)))
    return s if len(s) <= limit else s[: limit - 3] + "..."


def markdown_cell(text: object) -> str:
    """``text`` for one cell of a markdown table: inert (see the module docstring)."""
    s = plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return _AUTOLINK.sub(lambda m: m.group(1)[:-1] + "\u200b" + m.group(1)[-1], s)


# UTS #39 prototypes (confusables.txt) of the letters that pass for ASCII in a name: Cyrillic, Greek,
# Cherokee (capitals and their small forms), Latin small capitals and dotless letters, IPA, and digits or
# signs read as letters. Lower case throughout (applied after case folding).
_CHEROKEE = {  # capitals (case folding maps the small letters to them)
    0x13A0: "d",
    0x13A1: "r",
    0x13A2: "t",
    0x13A5: "i",
    0x13A9: "y",
    0x13AA: "a",
    0x13AB: "j",
    0x13AC: "e",
    0x13B3: "w",
    0x13B7: "m",
    0x13BB: "h",
    0x13C0: "g",
    0x13C2: "h",
    0x13C3: "z",
    0x13CF: "b",
    0x13D2: "r",
    0x13D9: "v",
    0x13DA: "s",
    0x13DE: "l",
    0x13DF: "c",
    0x13E2: "p",
    0x13E6: "k",
    0x13E7: "d",
    0x13F4: "b",
}
_PROTOTYPES = {
    **dict(zip("аеорсхуіјѕԁһӏкмнтвьпԛԝѵ", "aeopcxyijsdhlkmhtbbnqwv")),  # Cyrillic
    **dict(zip("αεορνιτκμβυχγ", "aeopvitkmbuxy")),  # Greek
    **{chr(c): v for c, v in _CHEROKEE.items()},
    **dict(zip("ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢ", "abcdefghijklmnoprstuvwyz")),  # Latin small capitals
    "ı": "i", "ȷ": "j", "ɩ": "i", "ɑ": "a", "ɡ": "g", "ɔ": "o", "ʋ": "u",  # dotless and IPA letters
    "0": "o", "1": "l", "i": "l", "|": "l", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "9": "g",
}  # fmt: skip
_TABLE = str.maketrans(_PROTOTYPES)


def skeleton(text: str) -> str:
    """How ``text`` looks (module docstring): two names with the same skeleton are look-alikes. Letters only."""
    import unicodedata

    s = "".join(ch for ch in str(text) if unicodedata.category(ch) != "Cf")  # zero-width, bidi overrides
    s = unicodedata.normalize("NFKC", s).casefold()
    s = "".join(ch for ch in unicodedata.normalize("NFD", s) if not unicodedata.combining(ch))
    s = unicodedata.normalize("NFD", s.translate(_TABLE).translate(_TABLE)).replace("rn", "m").replace("vv", "w")
    return "".join(ch for ch in s if ch.isalpha() and ch.isascii())


def table_text(table: Any, fmt: str) -> str:
    """A pandas table as inert text: a markdown table of :func:`markdown_cell` cells for ``fmt``
    ``"markdown"``, else its fixed-width ``to_string`` with every cell through :func:`plain`."""
    if fmt == "markdown":
        cols = [markdown_cell(c) for c in table.columns]
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += [
            "| " + " | ".join(markdown_cell(v) for v in row) + " |" for row in table.astype(str).itertuples(index=False)
        ]
        return "\n".join(lines)
    return str(table.map(lambda v: plain(str(v))).to_string(index=False))
