"""Coverage-guided fuzzing with atheris (libFuzzer) where it pays: the text parsers.

Targets (each reads one byte string per run):

- ``ncu-csv``: the bytes as an Nsight Compute CSV export, read by :func:`analyzer.loading.ncu.load_ncu`
  (header sniffing, console noise, ragged rows, units, thousands separators, launch dimensions,
  kernel-name normalisation); seeded with the real exports, so mutations start from real structure;
- ``rule-yaml``: the bytes as a rule pack, loaded and validated by :func:`analyzer.rules.load_pack`
  (the safe YAML reader, expressions, templates, units), seeded with the default pack.

Every run goes through :func:`analyzer.cli.guarded` and :func:`analyzer.fuzz.harness.check_outcome`;
a disallowed outcome raises, which libFuzzer reports as a crash with the input saved. Usage::

    python -m analyzer.fuzz.coverage ncu-csv -runs=20000 -seed=1 -max_len=65536
    python -m analyzer.fuzz.coverage rule-yaml -runs=20000 -seed=1

Needs the ``fuzz`` extra (``pip install -e '.[fuzz]'``); atheris ships wheels for CPython 3.8-3.11
on Linux x86-64 (checked here on 3.11).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

COUNTS = {"runs": 0, "exit0": 0, "exit2": 0}


def _seed_corpus(target: str, folder: Path) -> None:
    from analyzer.testing import DATA_DIR, PUBLIC_DIR

    folder.mkdir(parents=True, exist_ok=True)
    if target == "ncu-csv":
        sources = sorted((DATA_DIR / "ncu").glob("*.details.csv"))[:3]
        public = PUBLIC_DIR / "CodeGandee__llm-perf-opt__ncu.details.csv"
        sources += [public] if public.is_file() else []
        for src in sources:  # the first 60 lines keep runs fast and the structure whole
            lines = src.read_bytes().splitlines(keepends=True)[:60]
            (folder / src.name).write_bytes(b"".join(lines))
    else:
        from analyzer.pipeline import default_rules_path

        text = default_rules_path().read_text(encoding="utf-8")
        (folder / "default.yaml").write_text(text, encoding="utf-8")
        blocks = text.split("\n  - id: ")
        for i, block in enumerate(blocks[1:6], 1):
            (folder / f"rule{i}.yaml").write_text("version: 1\nrules:\n  - id: " + block, encoding="utf-8")


def main(argv: list[str]) -> None:
    import atheris

    if len(argv) < 2 or argv[1] not in ("ncu-csv", "rule-yaml"):
        sys.exit("usage: python -m analyzer.fuzz.coverage ncu-csv|rule-yaml [libFuzzer flags]")
    target = argv[1]
    import jinja2  # noqa: F401 - imported before instrumentation: only our modules are instrumented
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import yaml  # noqa: F401

    with atheris.instrument_imports(include=["analyzer"]):
        import analyzer.loading.ncu.join  # noqa: F401 - the package imports its submodules on first use
        import analyzer.loading.ncu.read  # noqa: F401
        import analyzer.loading.ncu.standalone  # noqa: F401
        import analyzer.rules.expr  # noqa: F401
        import analyzer.rules.loader  # noqa: F401
        import analyzer.rules.templates  # noqa: F401
        import analyzer.yamlsafe  # noqa: F401
    from analyzer.fuzz.harness import check_outcome, run_guarded
    from analyzer.loading.ncu import load_ncu
    from analyzer.rules import load_pack

    work = Path(tempfile.mkdtemp(prefix=f"atheris-{target}-"))
    corpus = work / "corpus"
    _seed_corpus(target, corpus)
    path = work / ("input.csv" if target == "ncu-csv" else "input.yaml")

    def one(data: bytes) -> None:
        path.write_bytes(data)
        outcome = run_guarded((lambda: load_ncu(path)) if target == "ncu-csv" else (lambda: load_pack(path)))
        COUNTS["runs"] += 1
        COUNTS[f"exit{outcome.rc}"] = COUNTS.get(f"exit{outcome.rc}", 0) + 1
        check_outcome(outcome, names=[str(path)], time_limit=30, cpu_limit=10)

    flags = [a for a in argv[2:] if a.startswith("-")]
    atheris.Setup([argv[0], *flags, str(corpus)], one)
    import atexit

    atexit.register(lambda: print(f"{target}: {COUNTS}", file=sys.stderr))  # libFuzzer exits the process
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
