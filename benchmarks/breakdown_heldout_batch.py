"""One held-out batch's section in docs/breakdown-heldout.md, from the judged rows (the shared part).

Every held-out batch after the first has a section of its own: a heading with how many of its recordings are
right, an intro sentence, then one paragraph per program. :class:`Batch` is what differs between batches (its
folder under ``tests/data/heldout``, its ordinal, its intro, its programs and their texts); :func:`batch_notes`
writes the usual section (each program's recordings on one line each, then why a miss is wrong and any other
note), used by the third, fourth and later batches' modules. :func:`section_head` is the heading alone, for a
batch whose paragraphs are written by hand (the second batch).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Batch:
    """What one held-out batch's section says, besides the judged rows."""

    #: its folder under tests/data/heldout (the judged rows' ``gpu``)
    folder: str
    #: "second", "third", ...: the heading says "The <ordinal> batch"
    ordinal: str
    #: the sentence after the heading (where and when recorded, what was done with it)
    intro: str
    #: the programs, in the order of their paragraphs
    stems: tuple[str, ...] = ()
    #: what each program is, for its paragraph's title
    what: Mapping[str, str] = field(default_factory=dict)
    #: why a program's verdict is wrong (said only when one of its recordings is not right)
    miss_why: Mapping[str, str] = field(default_factory=dict)
    #: what else a program's paragraph says, right or wrong
    note: Mapping[str, str] = field(default_factory=dict)


def recording_line(j: Any) -> str:
    """One recording of a program: what the breakdown states against what the twin bought, and the verdict."""
    r = j.row
    where = f" in `{j.where}`" if j.where else ""
    got = f"{j.rule}{where} {j.impact_ns / 1e6:.1f} ms" if j.rule else "no breakdown finding"
    ratio = "n/a" if j.ratio is None else f"{j.ratio:.2f}"
    return (f"{r.fmt}{' (bare)' if j.stem.endswith('_bare') else ''}: {got} for a saving of "
            f"{r.saving_ns / 1e6:.1f} ms ({ratio}), {j.verdict}")


def section_head(judged: list[Any], batch: Batch) -> tuple[list[Any], list[str]]:
    """The batch's judged rows and its section's first lines (heading and intro); no rows, no lines."""
    mine = [j for j in judged if j.gpu == batch.folder]
    if not mine:
        return mine, []
    right = sum(j.verdict == "right" for j in mine)
    return mine, [f"\n## The {batch.ordinal} batch (`{batch.folder}`): {right} of {len(mine)} right\n",
                  batch.intro + "\n"]


def batch_notes(judged: list[Any], batch: Batch) -> str:
    """The batch's section: one paragraph per program, every recording of it on one line each."""
    mine, out = section_head(judged, batch)
    if not mine:
        return ""
    for stem in batch.stems:
        rows = sorted((j for j in mine if j.stem.removesuffix("_bare") == stem),
                      key=lambda j: (j.stem.endswith("_bare"), j.row.fmt))
        if not rows:
            continue
        text = f"**{stem} ({batch.what[stem]}).** The twin fixes {' and '.join(rows[0].fixes)}. "
        text += "; ".join(recording_line(j) for j in rows) + "."
        if stem in batch.miss_why and any(j.verdict != "right" for j in rows):
            text += " " + batch.miss_why[stem]
        if stem in batch.note:
            text += " " + batch.note[stem]
        out.append(text + "\n")
    return "\n".join(out)
