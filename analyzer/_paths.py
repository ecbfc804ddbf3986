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


#: what trace, report and metric file names end with (compression first, then the format): stripped to
#: name a run (default report names, sweep keys, strong-scaling runs)
TRACE_SUFFIXES: tuple[str, ...] = (".xz", ".gz", ".sqlite", ".nsys-rep", ".qdrep", ".ncu-rep", ".csv", ".json",
                                   ".pt.trace")  # torch.profiler's own names: <worker>.<time>.pt.trace.json


def trace_stem(path: str | Path) -> str:
    """The file name without its trace suffixes, stripped repeatedly and in any case
    (``medium_training_ctx256.sqlite.xz`` -> ``medium_training_ctx256``, ``rank0.json.gz`` -> ``rank0``,
    ``job_rank1.pt.trace.json.xz`` -> ``job_rank1``); a
    name that is nothing but a suffix stays whole."""
    name = Path(path).name
    changed = True
    while changed:
        changed = False
        for suffix in TRACE_SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    return name
