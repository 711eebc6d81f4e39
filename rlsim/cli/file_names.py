"""Names of the files and folders the CLI writes by default, kept within what file systems allow."""
from __future__ import annotations

import hashlib

# Most file systems allow 255 bytes a name; leave room for a suffix a user or the writer adds.
MAX_NAME = 200


def bounded_name(name: str) -> str:
    """`name`, or when too long its start and a digest of the whole (distinct names stay distinct)."""
    if len(name) <= MAX_NAME:
        return name
    return f"{name[:MAX_NAME - 13]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
