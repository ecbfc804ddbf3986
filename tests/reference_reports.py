"""Reference reports: what ``analyze`` writes for the committed real traces, kept to catch changes.

Every case below is rendered in all three formats (HTML, Markdown, JSON) with a fixed creation time;
``tests/data/reference-reports/`` holds the SHA-256 of each rendering plus the Markdown itself (small,
and readable in a review diff), and ``tests/test_reference_reports.py`` checks that today's code writes
the same bytes. Performance work (the loader's dtypes, the columnar cache, freeing facts) must not
change a byte; a change that means to alter a report regenerates the references in the same commit:

    .venv/bin/python tests/reference_reports.py --write        # rewrite tests/data/reference-reports/
    .venv/bin/python tests/reference_reports.py --check        # what the test does, with a diff

The cases: every ``tests/data/*.sqlite.xz`` with the default options, the two public exports (when
``../shared/traces-public`` is there), two ROCm torch.profiler traces, two ncu joins, a two-trace
comparison, and three option sets (``--window full``, ``--window 'step_*'`` with a ``--set`` override,
``--only-ranges``).
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
REF_DIR = DATA / "reference-reports"
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
FORMATS = ("html", "md", "json")


@dataclass(frozen=True)
class Case:
    name: str
    traces: tuple[Path, ...]
    ncu: tuple[Path, ...] = ()
    window: str | None = None
    sets: tuple[str, ...] = ()
    only_ranges: str | None = None
    extra: dict = field(default_factory=dict, hash=False)


def cases() -> list[Case]:
    from analyzer.testing import PUBLIC_DIR

    out = [Case(p.name.removesuffix(".sqlite.xz"), (p,)) for p in sorted(DATA.glob("*.sqlite.xz"))]
    for name in ("LeiWang1999__memfusion_artifact__report1.sqlite", "quasiben__nvtx-examples__cudf.sqlite"):
        if (PUBLIC_DIR / name).is_file():
            out.append(Case("public-" + name.split("__")[1], (PUBLIC_DIR / name,)))
    # ROCm (torch.profiler on MI300X, TraceLens' test data): reports in the trace's words, HIP calls and
    # compute units (analyzer.loading.vocabulary)
    for name in ("tracelens_bert_small_mi300x", "tracelens_sglang_prefill_mi300x"):
        out.append(Case("rocm-" + name.removeprefix("tracelens_"), (DATA / "public" / f"{name}.pt.trace.json.xz",)))
    ncu = DATA / "ncu"
    out += [
        Case("naive_attention+ncu-raw", (DATA / "naive_attention.sqlite.xz",), ncu=(ncu / "naive_attention.raw.csv",)),
        Case("occupancy+ncu-details", (DATA / "occupancy.sqlite.xz",), ncu=(ncu / "occupancy.details.csv",)),
        Case("compare-dataloader", (DATA / "dataloader_starved.sqlite.xz", DATA / "dataloader_starved_fixed.sqlite.xz")),
        Case("host_sync-window-full", (DATA / "host_sync.sqlite.xz",), window="full"),
        Case("small_training_ctx128-steps-set", (DATA / "small_training_ctx128.sqlite.xz",), window="step_*",
             sets=("gpu-idle-gaps.min_gap=0.2ms",)),
        Case("medium_training_ctx128-only-forward", (DATA / "medium_training_ctx128.sqlite.xz",),
             only_ranges="*forward*"),
    ]
    return [c for c in out if all(p.is_file() for p in (*c.traces, *c.ncu))]


def render_case(case: Case) -> dict[str, str]:
    """The three renderings of ``case`` (fixed creation time)."""
    from analyzer.pipeline import AnalysisOptions, analyze_paths
    from analyzer.reports import build_report, render

    options = AnalysisOptions(window_spec=case.window, sets=case.sets, ncu_files=case.ncu,
                              only_ranges=case.only_ranges)
    report = build_report(analyze_paths(list(case.traces), options), created=CREATED)
    return {fmt: _portable(render(report, fmt)) for fmt in FORMATS}  # type: ignore[arg-type]


def _portable(text: str) -> str:
    """The rendering with the checkout's location replaced (reports name their input paths), so the
    references hold in any clone: ``/work/main/tests/data/x.sqlite.xz`` -> ``<repo>/tests/data/x.sqlite.xz``."""
    from analyzer.testing import PUBLIC_DIR

    # the public folder as reports name it and as it resolves (a worktree may reach it through a link)
    for root, label in ((PUBLIC_DIR, "<public>"), (PUBLIC_DIR.resolve(), "<public>"), (REPO, "<repo>")):
        text = text.replace(str(root), label)
    return text


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_index() -> dict[str, dict[str, str]]:
    path = REF_DIR / "index.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def compare(case: Case, got: dict[str, str], index: dict[str, dict[str, str]]) -> Iterator[str]:
    """One line per rendering of ``case`` that differs from the references (with a Markdown diff)."""
    want = index.get(case.name)
    if want is None:
        yield f"{case.name}: no reference (run tests/reference_reports.py --write)"
        return
    for fmt in FORMATS:
        if digest(got[fmt]) != want.get(fmt):
            yield f"{case.name}: {fmt} differs from the reference"
    ref_md = REF_DIR / f"{case.name}.md"
    if ref_md.is_file() and digest(got["md"]) != want.get("md"):
        diff = difflib.unified_diff(ref_md.read_text(encoding="utf-8").splitlines(), got["md"].splitlines(),
                                    "reference", "now", lineterm="", n=1)
        yield "\n".join(list(diff)[:40])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite tests/data/reference-reports/")
    mode.add_argument("--check", action="store_true", help="compare with the references")
    ap.add_argument("--out", type=Path, default=REF_DIR, help="folder to write (with --write)")
    ap.add_argument("--full", type=Path, default=None, help="also write every rendering here (to diff by hand)")
    ap.add_argument("names", nargs="*", help="only these cases")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    chosen = [c for c in cases() if not args.names or c.name in args.names]
    index = load_index()
    bad = 0
    for case in chosen:
        got = render_case(case)
        if args.full:
            args.full.mkdir(parents=True, exist_ok=True)
            for fmt, text in got.items():
                (args.full / f"{case.name}.{fmt}").write_text(text, encoding="utf-8")
        if args.write:
            index[case.name] = {fmt: digest(text) for fmt, text in got.items()}
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{case.name}.md").write_text(got["md"], encoding="utf-8")
            print(f"{case.name}: written", flush=True)
        else:
            problems = list(compare(case, got, index))
            bad += bool(problems)
            print("\n".join(problems) if problems else f"{case.name}: identical", flush=True)
    if args.write:
        (args.out / "index.json").write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
