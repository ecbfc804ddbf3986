"""A trace's report section in the trace's words (:mod:`analyzer.loading.vocabulary`): on a ROCm trace the
tables, charts and notes built from the facts name the HIP calls the trace recorded, where the facts
carry their CUDA equivalents, and the analyzer's own headers and captions say HIP and compute units.
The findings come worded from the rules stage (:mod:`analyzer.rules.wording`); this is the rest of the
section, so every format (HTML, Markdown, JSON, terminal) renders the same words."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from markupsafe import Markup

from analyzer.loading.vocabulary import Vocabulary
from analyzer.reports.format import map_text
from analyzer.reports.viewmodel import Column, Table


def in_words(obj: Any, words: Vocabulary) -> Any:
    """``obj`` (a view-model part) in ``words``: every string through :meth:`Vocabulary.values` (charts'
    markup too: a call name is letters and digits, nothing to escape), column headers and table captions
    (the analyzer's) through :meth:`Vocabulary.text`; ``obj`` itself on CUDA."""
    if not words.rocm:
        return obj

    def values(text: str) -> str:
        out = words.values(text)
        if out == text:
            return text
        return Markup(out) if isinstance(text, Markup) else out  # noqa: S704 - call names only changed

    def visit(part: Any) -> Any:
        if isinstance(part, Column):
            label = words.text(part.label)
            return part if label == part.label else replace(part, label=label)
        if isinstance(part, Table):
            return replace(part, columns=tuple(visit(c) for c in part.columns),
                           rows=map_text(part.rows, values, visit), caption=words.text(part.caption))
        return None

    return map_text(obj, values, visit)
