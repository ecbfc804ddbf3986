"""How messages and reports name files: relative to the working directory when they lie below it (no CI
runner's home folder in a report), else as given."""
from __future__ import annotations

import os
from pathlib import Path


def shown_path(path: str | Path) -> str:
    text = str(path)
    try:
        rel = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return text
    return text if rel.startswith("..") else rel
