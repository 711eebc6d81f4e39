"""Names of the files and folders the CLI writes by default, kept within what file systems allow."""
from __future__ import annotations

import hashlib
import re

# Most file systems allow 255 bytes a name; leave room for a suffix a user or the writer adds.
MAX_NAME = 200
_UNSAFE = re.compile(r"[/\\\x00-\x1f\x7f:]+")


def bounded_name(name: str) -> str:
    """`name`, or when too long (in bytes, as file systems count) its start and a digest of the whole, so distinct
    names stay distinct."""
    if len(name.encode()) <= MAX_NAME:
        return name
    start = name.encode()[:MAX_NAME - 13].decode(errors="ignore")
    return f"{start}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def folder_name(name: str) -> str:
    """`name` as one folder name inside the folder the CLI writes to: no path separators or control characters,
    no leading dot (so never `.` or `..`, nor hidden), not empty, and bounded in length. A scenario's name is the
    user's text, and written as it is `../../x` or `/etc` would put a run folder anywhere."""
    cleaned = _UNSAFE.sub("_", name).lstrip(".") or "_"
    return bounded_name(cleaned)
