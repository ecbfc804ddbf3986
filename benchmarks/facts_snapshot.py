"""Snapshot every fact of every committed trace, and compare two snapshots exactly.

    python benchmarks/facts_snapshot.py write DIR [TRACE ...]      # default: every trace under tests/data
    python benchmarks/facts_snapshot.py compare OLD_DIR NEW_DIR [--categorical-text]

A speed or memory change to a fact must not change what it computes. ``write`` loads each trace (no
trace cache), prepares it with the automatic window and with ``--window full``, computes every registered
fact (dependency order) and pickles the frames; ``compare`` checks every frame of two snapshots with
``pandas.testing.assert_frame_equal`` (exact values, dtypes, column order, index) and prints one line per
difference. A fact that raised is recorded as its error text and compared as such. Run ``write`` on the
code before the change and after it (e.g. from a second worktree) and ``compare`` the two.
``--categorical-text``: a text column that is categorical on one side and plain text on the other (a
column narrowed to codes) is compared by its values, and listed as a dtype change, not a difference.
"""
from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRACE_SUFFIXES = (".sqlite", ".sqlite.xz", ".nsys-rep", ".pt.trace.json", ".pt.trace.json.gz",
                  ".pt.trace.json.xz")
WINDOWS = (None, "full")


def committed_traces() -> list[Path]:
    out = []
    for p in sorted((ROOT / "tests" / "data").rglob("*")):
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES):
            out.append(p)
    return out


def snapshot(trace_path: Path) -> dict[str, object]:
    from analyzer.facts import FactStore, all_specs
    from analyzer.facts.registry import dependency_order
    from analyzer.loading import load_trace
    from analyzer.pipeline import AnalysisOptions, prepare

    out: dict[str, object] = {}
    try:
        trace = load_trace(trace_path)
    except Exception as exc:  # noqa: BLE001 - recorded, compared as text
        return {"<load>": f"{type(exc).__name__}: {exc}"}
    for window in WINDOWS:
        try:
            store: FactStore = prepare(trace, AnalysisOptions(window_spec=window))
        except Exception as exc:  # noqa: BLE001
            out[f"{window}/<prepare>"] = f"{type(exc).__name__}: {exc}"
            continue
        out[f"{window}/<window>"] = (store.window.start_ns, store.window.end_ns, store.window.source)
        for name in dependency_order(list(all_specs())):
            try:
                out[f"{window}/{name}"] = store.get(name)
            except Exception as exc:  # noqa: BLE001
                out[f"{window}/{name}"] = f"{type(exc).__name__}: {exc}"
    return out


def write(out_dir: Path, traces: list[Path]) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    for p in traces:
        key = str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
        snap = snapshot(p)
        with open(out_dir / (key.replace("/", "__") + ".pkl"), "wb") as fh:
            pickle.dump(snap, fh, protocol=pickle.HIGHEST_PROTOCOL)
        print(f"{key}: {len(snap)} entries", file=sys.stderr)
    return 0


def _text_as_values(x, y):  # type: ignore[no-untyped-def]
    """``(x, y, columns)``: the columns categorical on one side only, as object text on both."""
    import pandas as pd

    changed = [c for c in x.columns if c in y.columns
               and isinstance(x[c].dtype, pd.CategoricalDtype) != isinstance(y[c].dtype, pd.CategoricalDtype)]
    if changed:
        x = x.astype({c: object for c in changed})
        y = y.astype({c: object for c in changed})
    return x, y, changed


def compare(old: Path, new: Path, categorical_text: bool = False) -> int:
    import pandas as pd

    bad = 0
    narrowed: dict[str, set[str]] = {}
    names = sorted({p.name for p in old.glob("*.pkl")} | {p.name for p in new.glob("*.pkl")})
    for fname in names:
        a_path, b_path = old / fname, new / fname
        if not a_path.exists() or not b_path.exists():
            print(f"{fname}: only in {'new' if not a_path.exists() else 'old'}")
            bad += 1
            continue
        a, b = (pickle.loads(p.read_bytes()) for p in (a_path, b_path))
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                print(f"{fname} {key}: only in {'new' if key not in a else 'old'}")
                bad += 1
                continue
            x, y = a[key], b[key]
            if isinstance(x, pd.DataFrame) and isinstance(y, pd.DataFrame):
                if categorical_text:
                    x, y, changed = _text_as_values(x, y)
                    for c in changed:
                        narrowed.setdefault(f"{key.split('/', 1)[1]}.{c}", set()).add(fname)
                try:
                    pd.testing.assert_frame_equal(x, y, check_exact=True)
                except AssertionError as exc:
                    print(f"{fname} {key}: " + " ".join(str(exc).split())[:400])
                    bad += 1
            elif type(x) is not type(y) or x != y:
                print(f"{fname} {key}: {str(x)[:200]!r} != {str(y)[:200]!r}")
                bad += 1
    for col, files in sorted(narrowed.items()):
        print(f"dtype changed, values identical: {col} ({len(files)} traces)")
    print(f"{len(names)} traces compared, {bad} differences")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir", type=Path)
    w.add_argument("traces", nargs="*", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--categorical-text", action="store_true",
                   help="compare text columns categorical on one side by value (a dtype change, listed)")
    args = ap.parse_args(argv)
    if args.cmd == "write":
        return write(args.dir, [p.resolve() for p in args.traces] or committed_traces())
    return compare(args.old, args.new, args.categorical_text)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
