"""Run the ``tests:`` cases next to each rule: analyze the trace, check the rule fires or stays silent.

Cases sharing a trace, ``set`` list and window are analyzed once, with the pack restricted to the rules
under test (so only the facts they need are computed).
"""
from __future__ import annotations

import lzma
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.errors import AnalyzerError
from analyzer.rules.model import Rule, RulePack, RuleTest

#: analyze(trace_path, pack, sets, window) -> Analysis (with .findings) or a list of findings
Analyze = Callable[[Path, RulePack, Sequence[str], "str | None"], Any]


@dataclass(frozen=True)
class CaseResult:
    rule: str
    id: str
    trace: str
    expect: str
    outcome: str  # "pass" | "fail" | "missing" | "error" | "skipped"
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Passed, or skipped: a built-in rule's case whose trace is not here (see :func:`run_rule_tests`)."""
        return self.outcome in ("pass", "skipped")


def builtin_pack_file(path: str | Path) -> bool:
    """Whether ``path`` is one of the analyzer's built-in pack files (shipped inside the package)."""
    from analyzer.rules.loader import BUILTIN_PACKS

    try:
        resolved = Path(path).resolve()
    except OSError:
        return False
    return any(resolved == p.resolve() for p in BUILTIN_PACKS.values())


def decompress(path: Path, folder: Path) -> Path:
    """``x.sqlite.xz`` -> ``folder/x.sqlite`` (streamed); other files are returned as they are."""
    if path.suffix != ".xz":
        return path
    target = folder / path.name[: -len(".xz")]
    if not target.exists():
        with lzma.open(path, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    return target


def run_rule_tests(pack: RulePack, names: Iterable[str] = (), *, analyze: Analyze,
                   roots: Sequence[Path] = ()) -> list[CaseResult]:
    """Results of every test case of the selected rules (all rules when ``names`` is empty), each trace
    analyzed by ``analyze`` (``analyze rules test`` passes the whole analysis,
    :func:`analyzer.commands.rules.default_analyze`). Relative trace paths are looked up under ``roots``
    first (:meth:`RuleTest.resolve`).

    A case whose trace (or ncu file) is not found is ``missing`` (a failure), except for the built-in
    pack's rules: their traces are the source repository's ``tests/data``, which an installed package
    does not carry, so those cases are ``skipped``."""
    run = analyze
    selected = pack.select(names) if names else pack
    results: list[CaseResult] = []
    groups: dict[tuple[tuple[Path, ...], tuple[str, ...], str | None, tuple[Path, ...]],
                 list[tuple[Rule, RuleTest]]] = {}
    for rule in selected.rules:
        for case in rule.tests:
            source = rule.file or pack.path
            paths = tuple(case.resolve_all(source, roots))
            ncu = tuple(case.resolve(source, n, roots) for n in case.ncu)
            if not paths or None in ncu:
                missing = "trace file not found" if not paths else "ncu file not found"
                outcome = "skipped" if builtin_pack_file(source) else "missing"
                results.append(CaseResult(rule.name, rule.id, case.trace, case.expect, outcome, missing))
                continue
            groups.setdefault((paths, case.sets, case.window, ncu), []).append((rule, case))  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix="rules-test-") as tmp:
        for (paths, sets, window, ncu), cases in groups.items():
            subset = pack.select(sorted({rule.id for rule, _ in cases}))
            try:
                files = [decompress(p, Path(tmp)) for p in paths]
                trace: Any = files[0] if len(files) == 1 else files  # several: the rank files of one job
                # only cases with ncu files pass them: custom ``analyze`` callables keep their 4 arguments
                result = run(trace, subset, sets, window, ncu) if ncu else run(trace, subset, sets, window)  # type: ignore[call-arg]
                findings: Any = result.findings if hasattr(result, "findings") else result
                fired = {f.rule for f in findings}
                unchecked = {n.rule: n.reason for n in getattr(result, "not_checked", ())}
            except (AnalyzerError, OSError, lzma.LZMAError) as err:
                results += [CaseResult(r.name, r.id, c.trace, c.expect, "error", str(err)) for r, c in cases]
                continue
            for rule, case in cases:
                if rule.name in unchecked:
                    results.append(CaseResult(rule.name, rule.id, case.trace, case.expect, "fail",
                                              f"not available in this trace: {unchecked[rule.name]}"))
                    continue
                did = "fire" if rule.name in fired else "silent"
                outcome = "pass" if did == case.expect else "fail"
                detail = "" if outcome == "pass" else f"expected {case.expect}, rule was {did}"
                results.append(CaseResult(rule.name, rule.id, case.trace, case.expect, outcome, detail))
    order = {r.id: i for i, r in enumerate(pack.rules)}
    return sorted(results, key=lambda r: order.get(r.id, 0))
