"""Fuzz harnesses: every reader and the rule language, fed damaged copies of real inputs.

Each harness turns one generated case into one run of the same code path the ``analyze`` command takes
(through :func:`analyzer.cli.guarded`) and checks the outcome (:mod:`analyzer.fuzz.harness`): exit 0/1
with a report, or exit 2 with exactly one ``error:`` line that names the damaged file; never a
traceback, an internal error (exit 3), a hang (the per-trace watchdog) or unbounded memory; the input
file is byte-identical afterwards.

- :mod:`analyzer.fuzz.nsys` -- schema and data mutations of real nsys SQLite exports;
- :mod:`analyzer.fuzz.ncu` -- damaged real Nsight Compute CSV exports;
- :mod:`analyzer.fuzz.rules` -- rule packs: YAML structure, expressions, templates, parameters.

``analyzer/fuzz/tests`` runs a bounded, seeded number of cases of each in ``make test``;
``make fuzz`` (``python -m analyzer.fuzz``) runs many more and writes the numbers that
``docs/robustness.md`` reports. Needs the ``dev`` extra (hypothesis); ``atheris`` optionally.
"""
