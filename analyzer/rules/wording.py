"""A rule pack in one trace's words (:mod:`analyzer.loading.vocabulary`): on a ROCm trace every text a
rule writes (title, message and verdict templates, what/why/fix) names HIP calls and compute units. The
templates are reworded before they are rendered, so the values a message prints (kernel and NVTX names)
are never touched; the findings' values are put in the trace's words by :func:`finding_words`."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from analyzer.findings import Finding
from analyzer.loading.vocabulary import Vocabulary
from analyzer.rules.model import Rule, RulePack
from analyzer.rules.templates import recompile

#: the last pack reworded, per vocabulary: (pack, vocabulary) -> reworded pack (a job's ranks share both)
_LAST: dict[int, tuple[RulePack, Vocabulary, RulePack]] = {}


def _rule(rule: Rule, words: Vocabulary) -> Rule:
    text = words.text
    changes: dict[str, Any] = {f: text(getattr(rule, f)) for f in ("title", "message", "what", "why", "fix",
                                                                    "verdict")}
    changes = {f: v for f, v in changes.items() if v != getattr(rule, f)}
    if not changes:
        return rule
    if "message" in changes and rule.template is not None:
        changes["template"] = recompile(changes["message"])
    if "verdict" in changes and rule.verdict_template is not None:
        changes["verdict_template"] = recompile(changes["verdict"])
    return replace(rule, **changes)


def pack_words(pack: RulePack, words: Vocabulary) -> RulePack:
    """``pack`` with its rules' texts in ``words`` (the pack itself on CUDA)."""
    if not words.rocm:
        return pack
    last = _LAST.get(id(pack))
    if last is not None and last[0] is pack and last[1] == words:
        return last[2]
    out = replace(pack, rules=tuple(_rule(r, words) for r in pack.rules))
    _LAST.clear()  # one entry: a run analyzes with one pack
    _LAST[id(pack)] = (pack, words, out)
    return out


def finding_words(finding: Finding, words: Vocabulary) -> Finding:
    """``finding`` with the call names in its message, headline and evidence as the trace recorded them
    (:meth:`Vocabulary.values`), and the evidence's details the analyzer wrote (``CUDA graph capture``:
    the timeline breakdown's own) in the platform's words; the finding itself on CUDA."""
    if not words.recorded and not words.rocm:
        return finding
    from analyzer.facts.breakdown import OWN_DETAILS

    values = words.values

    def cell(v: Any) -> Any:
        if not isinstance(v, str):
            return v
        return words.text(v) if v in OWN_DETAILS else values(v)

    evidence = tuple(tuple(cell(v) for v in row) for row in finding.evidence)
    return replace(finding, message=values(finding.message), headline=values(finding.headline),
                   evidence=evidence)
