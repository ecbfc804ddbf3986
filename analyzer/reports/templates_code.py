"""The report templates' Python code, generated ahead of time and shipped with them.

Jinja turns a template into Python source before Python compiles it; for ``report.html.j2`` that
generation is 60-90 ms of every HTML report (Python's own ``compile`` of the result: 10-20 ms). The
generated source of every template is kept in ``templates/compiled.json`` (package data, written by
``tests/generated_docs.py --write``, checked by its ``--check``), each with a key: the template
source's SHA-256, Jinja's version and the environment's settings that shape the code. A template whose
key differs (edited since, another Jinja) is generated as before, so a stale file costs time, never a
wrong report. Nothing is read from outside the package: no cache on disk (see :mod:`analyzer.reports.html`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import Environment, PackageLoader, Template

#: the generated code of the package's templates, per template name (``key``, ``code``)
COMPILED = Path(__file__).resolve().parent / "templates" / "compiled.json"


def template_key(env: Environment, source: str) -> str:
    """What the generated code of ``source`` depends on: the source, Jinja, the environment's syntax,
    whitespace and escaping settings."""
    settings = (jinja2.__version__, env.block_start_string, env.block_end_string, env.variable_start_string,
                env.variable_end_string, env.comment_start_string, env.comment_end_string,
                env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks,
                env.newline_sequence, env.keep_trailing_newline, repr(env.autoescape), env.optimized,
                env.finalize is not None, env.is_async, sorted(env.extensions))
    return hashlib.sha256(json.dumps([source, repr(settings)]).encode()).hexdigest()


def generate(env: Environment, names: list[str]) -> str:
    """``templates/compiled.json``'s content for the templates ``names`` of ``env``."""
    assert env.loader is not None
    out: dict[str, dict[str, str]] = {}
    for name in sorted(names):
        source, _, _ = env.loader.get_source(env, name)
        code = env.compile(source, name, None, raw=True)
        out[name] = {"key": template_key(env, source), "code": code}
    return json.dumps(out, indent=1, sort_keys=True) + "\n"


class PrecompiledLoader(PackageLoader):
    """:class:`~jinja2.PackageLoader` that takes a template's code from :data:`COMPILED` when its key
    matches (else generates it, as Jinja does)."""

    def __init__(self, package_name: str, package_path: str = "templates") -> None:
        super().__init__(package_name, package_path)
        self._compiled: dict[str, dict[str, str]] | None = None

    def _entry(self, name: str) -> dict[str, str] | None:
        if self._compiled is None:
            try:
                self._compiled = json.loads(COMPILED.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self._compiled = {}
        entry = self._compiled.get(name) if isinstance(self._compiled, dict) else None
        return entry if isinstance(entry, dict) else None

    def load(self, environment: Environment, name: str,
             globals: MutableMapping[str, Any] | None = None) -> Template:
        source, filename, uptodate = self.get_source(environment, name)
        entry = self._entry(name)
        if entry is None or entry.get("key") != template_key(environment, source):
            code: Any = environment.compile(source, name, filename)
        else:
            code = compile(entry["code"], filename or "<template>", "exec")
        return environment.template_class.from_code(environment, code, environment.make_globals(globals),
                                                    uptodate)

