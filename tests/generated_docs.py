"""Documentation generated from the code, never copied by hand: ``make docs`` writes it,
``tests/test_generated_docs.py`` fails when it drifts.

    .venv/bin/python tests/generated_docs.py --write    # rewrite every generated file and block
    .venv/bin/python tests/generated_docs.py --check    # exit 1, with a diff, when one differs

What it writes:

- ``reports/demo.md`` and ``reports/demo.html``: the report of the demo trace (``make demo``'s input,
  ``tests/data/dataloader_starved.sqlite.xz``), rendered as the reference reports are (fixed date,
  portable paths), so they equal ``tests/data/reference-reports/dataloader_starved.*``;
- the README's blocks between ``<!-- generated:NAME -->`` and ``<!-- /generated -->``: ``demo-terminal``
  (what ``make demo`` prints) and ``demo-markdown`` (the opening of ``reports/demo.md``, its first
  ``lines=N`` lines);
- ``reports/demo.png``: a headless-Chromium screenshot of ``reports/demo.html`` (``--write`` only, when
  that file changed, the PNG is missing, or with ``--screenshot``; not compared by ``--check``: pixels
  differ between Chromium builds and fonts). No test writes it, so a test run leaves ``git status`` clean;
- ``docs/rules.md`` (:mod:`analyzer.rules.docgen`, from the rule pack's metadata);
- ``analyzer/reports/templates/compiled.json``: the report templates' generated Python code
  (:mod:`analyzer.reports.templates_code`);
- ``docs/writing-rules.md``'s ``config-example`` block: ``analyze config --ignore NCU`` run in a scratch
  project made of the page's own ``pyproject.toml`` and ``.gpu/rules.yaml`` examples (the pack without
  its ``rules:`` list, which points at another section).
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout's analyzer, never an installed one
DEMO_TRACE = REPO / "tests" / "data" / "dataloader_starved.sqlite.xz"
#: what ``make demo`` writes (an ignored path: a demo run leaves ``git status`` clean)
DEMO_OUTPUT = "reports/dataloader_starved.html"
BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w-]+)(?P<args>[^>]*?) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)
TERMINAL_WIDTH = 110


def demo_renderings() -> dict[str, str]:
    """The demo report as Markdown, HTML and terminal text (the reference reports' date and paths)."""
    from reference_reports import CREATED, _portable

    from analyzer.pipeline import AnalysisOptions, analyze_paths
    from analyzer.reports import build_report, render
    from analyzer.reports.summary import summary_text

    report = build_report(analyze_paths([DEMO_TRACE], AnalysisOptions()), created=CREATED)
    terminal = summary_text(report, width=TERMINAL_WIDTH) + f"report: {DEMO_OUTPUT}\n"
    return {"md": _portable(render(report, "md")), "html": _portable(render(report, "html")),
            "terminal": _portable(terminal)}


def config_example(page: str) -> str:
    """What ``analyze config --ignore NCU`` prints in a project made of the page's own examples."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", page, re.S)
    pack = next(b for k, b in blocks if k == "yaml" and b.startswith("version: 1\nextends: default")
                and "\ndisable:" in b and "\noverride:" in b)  # the composing pack of the .gpu/rules.yaml example
    pyproject = next(b for k, b in blocks if k == "toml" and b.startswith("[tool.gpu-trace-analyzer]\n"))
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / ".gpu").mkdir()
        (Path(scratch) / ".gpu" / "rules.yaml").write_text(pack.split("\nrules:")[0] + "\n", encoding="utf-8")
        (Path(scratch) / "pyproject.toml").write_text(pyproject, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-m", "analyzer.cli", "config", "--ignore", "NCU"], cwd=scratch,
                              env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"analyze config failed on the page's examples: {done.stderr.strip()}")
    return "$ analyze config --ignore NCU\n" + done.stdout


def fill_blocks(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each generated block's body replaced (``lines=N``: only the first N lines)."""
    def body(m: re.Match[str]) -> str:
        name, args = m.group("name"), m.group("args")
        if name not in blocks:
            raise KeyError(f"unknown generated block {name!r}")
        content = blocks[name]
        lines = re.search(r"lines=(\d+)", args)
        if lines:
            content = "\n".join(content.splitlines()[: int(lines.group(1))]) + "\n"
        fence = "```markdown" if name.endswith("markdown") else "```console"
        return f"{m.group(1)}{fence}\n{content}```\n{m.group(5)}"
    return BLOCK.sub(body, text)


def expected() -> dict[Path, str]:
    """Every generated file, path -> the content the code gives today."""
    from analyzer.reports.html import environment
    from analyzer.reports.templates_code import COMPILED, generate
    from analyzer.rules import load_pack
    from analyzer.rules.docgen import DEFAULT_PACK, render_docs

    demo = demo_renderings()
    readme = REPO / "README.md"
    blocks = {"demo-terminal": "$ make demo\n" + demo["terminal"], "demo-markdown": demo["md"]}
    rules_page = REPO / "docs" / "writing-rules.md"
    page = rules_page.read_text(encoding="utf-8")
    return {
        rules_page: fill_blocks(page, {"config-example": config_example(page)}),
        REPO / "reports" / "demo.md": demo["md"],
        REPO / "reports" / "demo.html": demo["html"],
        readme: fill_blocks(readme.read_text(encoding="utf-8"), blocks),
        REPO / "docs" / "rules.md": render_docs(load_pack(DEFAULT_PACK)),
        COMPILED: generate(environment(), environment().list_templates(extensions=["j2"])),
    }


DEMO_HTML = REPO / "reports" / "demo.html"
DEMO_PNG = REPO / "reports" / "demo.png"


def screenshot_demo() -> str:
    """Write ``reports/demo.png`` from ``reports/demo.html``: the verdict, the findings and the overview
    charts (the first 3,200 px at 1,280 px wide). Returns what was done, for the log."""
    from analyzer.reports.tests.cdp import Browser, find_chromium

    chromium = find_chromium()
    if chromium is None:
        return f"{DEMO_PNG.relative_to(REPO)}: not rewritten (no chromium found: apt-get install chromium)"
    with Browser(chromium) as browser:
        browser.navigate(DEMO_HTML.as_uri())
        problems = browser.problems()
        if problems:
            raise RuntimeError(f"{DEMO_HTML.relative_to(REPO)} does not open cleanly: {problems[:3]}")
        browser.screenshot(DEMO_PNG, max_height=3200)
    return f"{DEMO_PNG.relative_to(REPO)}: written (screenshot of {DEMO_HTML.relative_to(REPO)})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated files and blocks")
    mode.add_argument("--check", action="store_true", help="compare them with what the code gives")
    ap.add_argument("--screenshot", action="store_true",
                    help="with --write: rewrite reports/demo.png even when reports/demo.html did not change")
    args = ap.parse_args(argv)
    bad = 0
    shoot = args.write and (args.screenshot or not DEMO_PNG.is_file())
    for path, text in expected().items():
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        if old == text:
            continue
        if args.write:
            path.write_text(text, encoding="utf-8")
            print(f"{path.relative_to(REPO)}: written")
            shoot = shoot or path == DEMO_HTML
        else:
            bad += 1
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), "committed", "generated", lineterm="", n=1)
            print(f"{path.relative_to(REPO)} differs from what the code gives (make docs):")
            print("\n".join(list(diff)[:30]))
    if shoot:
        print(screenshot_demo())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
