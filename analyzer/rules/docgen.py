"""Generate the rule reference (``docs/rules.md``) from rule metadata, so it is never written twice.

    python -m analyzer.rules.docgen [PACK] > docs/rules.md

PACK defaults to the built-in pack. A test checks that ``docs/rules.md`` is up to date.
"""
from __future__ import annotations

import sys
from pathlib import Path

from analyzer.errors import AnalyzerError
from analyzer.rules.loader import DEFAULT_PACK, load_pack
from analyzer.rules.model import Rule, RulePack

REPO_ROOT = Path(__file__).resolve().parents[2]


def _label(path: str) -> str:
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return resolved.name


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_docs(pack: RulePack) -> str:
    """The Markdown rule reference for ``pack`` (deterministic)."""
    out = [
        "# Rule reference",
        "",
        f"<!-- Generated from {_label(pack.path)} by `python -m analyzer.rules.docgen`; do not edit. -->",
        "",
        (
            f"{len(pack)} rules. Change a parameter for one run with `--set RULE.PARAM=VALUE` "
            "(rule name or id); see [writing-rules.md](writing-rules.md) to write your own."
        ),
        "",
        "| id | name | severity | category | scope | title |",
        "|---|---|---|---|---|---|",
    ]
    for rule in pack.rules:
        out.append(f"| [{rule.id}](#{rule.id.lower()}) | `{rule.name}` | {rule.severity} | {rule.category} "
                   f"| {rule.scope} | {_cell(rule.title)} |")
    for rule in pack.rules:
        out += [""] + _rule_section(rule)
    return "\n".join(out).rstrip() + "\n"


def _rule_section(rule: Rule) -> list[str]:
    out = [
        f'<a id="{rule.id.lower()}"></a>',
        f"## {rule.id} `{rule.name}`: {rule.title}",
        "",
        (
            f"**Severity** {rule.severity} · **category** {rule.category} · **scope** {rule.scope} · "
            f"**reads** {', '.join(f'`{f}`' for f in rule.requires)}"
            + (" · **a symptom**: reported as what the causes explain, never added to the verdict's total"
               if rule.kind == "symptom" else "")
        ),
        "",
        *_needs(rule),
        "### What it detects",
        "",
        rule.what.strip(),
        "",
        "### Why it matters",
        "",
        rule.why.strip(),
        "",
        "### How to fix it",
        "",
        rule.fix.strip(),
        "",
    ]
    if rule.calibration.strip():
        out += ["### How it was calibrated", "", rule.calibration.strip(), ""]
    out += [
        "### When it fires",
        "",
        "```yaml",
    ]
    if rule.where is not None:
        out.append(f"where: {rule.where.source.strip()}")
    for name, expr in rule.lets:
        out.append(f"let {name}: {expr.source.strip()}")
    out.append(f"condition: {rule.condition.source.strip()}")
    if rule.impact is not None:
        out.append(f"impact: {rule.impact.source.strip()}")
    out += ["```", ""]
    if rule.parameters:
        out += ["### Parameters", "", "| parameter | default | unit | meaning |", "|---|---|---|---|"]
        for p in rule.parameters:
            out.append(f"| `{p.name}` | `{p.default_text}` | {p.unit} | {_cell(p.doc)} |")
        out.append("")
    if rule.references:
        out += ["### References", ""] + [f"- <{ref}>" for ref in rule.references] + [""]
    if rule.tests:
        out += ["### Test traces", ""]
        for case in rule.tests:
            extra = f" with `--set {' '.join(case.sets)}`" if case.sets else ""
            note = f" ({_cell(case.note)})" if case.note else ""
            verb = "fires" if case.expect == "fire" else "stays silent"
            out.append(f"- `{case.trace}`: {verb}{extra}{note}")
        out.append("")
    return out


def _needs(rule: Rule) -> list[str]:
    """A line naming the trace data the rule needs (it is reported "not available" without it)."""
    if not rule.needs:
        return []
    from analyzer.loading.capabilities import CAPABILITIES

    what = "; ".join(f"{CAPABILITIES.get(c, c)} (`{c}`)" for c in rule.needs)
    return [f"**Needs from the trace** {what}. On a trace without it the rule is not run and the report "
            "says it is not available in this trace.", ""]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        pack = load_pack(args[0] if args else DEFAULT_PACK)
    except AnalyzerError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    sys.stdout.write(render_docs(pack))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
