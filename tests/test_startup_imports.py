"""Start-up: what a command imports before it does its work. ``analyze --help`` (and every command's
``--help``, and a bare ``analyze``) imports no numpy, pandas, pyarrow, Jinja2 or YAML, and loading a
trace imports neither the rules, the facts nor the reports (nor Dask, nor the ADBC driver for a trace
whose tables the page route reads). Each case runs in a fresh interpreter and reads ``sys.modules``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: what a help screen never needs
NOT_FOR_HELP = ("numpy", "pandas", "pyarrow", "jinja2", "yaml", "dask", "distributed", "adbc_driver_manager",
                "analyzer.rules.engine", "analyzer.facts.registry", "analyzer.reports", "analyzer.loading")
#: what loading a trace never needs
NOT_FOR_LOADING = ("jinja2", "yaml", "dask", "distributed", "adbc_driver_manager", "analyzer.rules",
                   "analyzer.facts", "analyzer.reports", "analyzer.window", "analyzer.job")


def _imported(code: str, env: dict[str, str] | None = None) -> set[str]:
    """Top modules and packages imported by ``code`` run in a fresh interpreter in the checkout."""
    code += "\nimport json, sys\nprint('MODULES' + json.dumps(sorted(sys.modules)))\n"
    run_env = {k: v for k, v in os.environ.items() if k not in ("ANALYZER_SQLITE_BACKEND", "ANALYZER_SQLITE_PAGES")}
    run_env.update(env or {})
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=run_env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return set(json.loads(out.split("MODULES", 1)[1]))


def _heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize("args", [["--help"], ["--version"], [], ["run", "--help"], ["rules", "--help"],
                                  ["sweep", "--help"], ["diff", "--help"], ["config", "--help"]])
def test_help_imports_nothing_heavy(args):
    modules = _imported("from analyzer.cli import cli\n"
                        f"try:\n    cli.main(args={args!r}, prog_name='analyze')\n"
                        "except SystemExit:\n    pass\n")
    assert "analyzer.cli" in modules
    assert _heavy(modules, NOT_FOR_HELP) == []


@pytest.mark.parametrize("trace", ["tests/data/healthy.sqlite.xz", "tests/data/tiny_kernels.sqlite.xz",
                                   "tests/data/kineto/alloc_churn.pt.trace.json.gz"])
def test_loading_a_trace_imports_no_later_stage(trace):
    """The loader alone: no rules engine, fact, report, window or job module, no Dask; the committed nsys
    traces' tables all take the page route or are small, so the ADBC driver (``pyarrow.dataset`` with it)
    is not imported either, whether or not it is installed."""
    modules = _imported("from analyzer.loading import load_trace\n"
                        f"trace = load_trace({trace!r}, cache_dir=None)\n"
                        "assert len(trace.kernels) > 0\n")
    assert "analyzer.loading" in modules
    assert _heavy(modules, NOT_FOR_LOADING) == []


#: what analyzing one single-process trace into a JSON report never needs
NOT_FOR_ONE_TRACE = ("analyzer.job.run", "analyzer.job.rank", "analyzer.job.cross", "analyzer.job.remote",
                     "dask", "distributed", "adbc_driver_manager", "analyzer.reports.html", "analyzer.reports.svg",
                     "analyzer.diff.compare", "analyzer.phases.sweep")


def test_one_trace_run_imports_no_job_machinery(tmp_path):
    """``analyze TRACE --format json`` on one single-process trace: the multi-GPU job machinery (rank
    phases, cross-rank matching, Dask), the HTML renderer and the other commands' modules stay out."""
    out = tmp_path / "report.json"
    modules = _imported("from analyzer.cli import cli\n"
                        f"cli.main(args=['tests/data/healthy.sqlite.xz', '--no-cache', '-q', '-o', {str(out)!r}],"
                        " prog_name='analyze', standalone_mode=False)\n")
    assert out.stat().st_size > 0 and "analyzer.reports.jsonout" in modules
    assert _heavy(modules, NOT_FOR_ONE_TRACE) == []


@pytest.mark.parametrize("package", ["analyzer.rules", "analyzer.facts", "analyzer.phases"])
def test_lazy_package_names_resolve(package):
    """Every name a lazily exporting package lists in ``__all__`` resolves to its submodule's object,
    and a name it does not export is an AttributeError (``hasattr`` and ``from X import *`` work)."""
    import importlib

    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert value is not None and getattr(module, name) is value, (package, name)
    assert not hasattr(module, "no_such_name")
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # noqa: S102 - a fixed import statement
    assert set(module.__all__) <= set(namespace)
