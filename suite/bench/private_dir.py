"""Folders only their owner can use: the store's spool and ``mpcbench verify --resume``.

A folder at a predictable path in shared temp space (``/tmp/mpcbench-spool/...``) could be made
in advance by another user, who would then read or plant what is kept there. :func:`private_dir`
creates a folder with mode 0700, or accepts an existing one only if it is a real folder (not a
link) owned by this user and closed to everyone else.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["PrivateDirError", "private_dir", "is_private_dir"]


class PrivateDirError(OSError):
    """The folder exists but another user could read or write it (one line naming it)."""


def is_private_dir(path: Path) -> str:
    """ "" if ``path`` is a folder owned by this user that no one else can use, else why not."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a plain folder (a link or a file)"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to user id {st.st_uid}, not to this user ({os.geteuid()})"
    if st.st_mode & 0o077:
        return f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o}); chmod 700 it"
    return ""


def private_dir(path: str | Path) -> Path:
    """``path`` as a private folder: created with mode 0700 (parents as needed), or checked if it
    exists; raises :class:`PrivateDirError` when another user could reach what it holds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    why = is_private_dir(path)
    if why:
        raise PrivateDirError(why)
    return path
