"""Reports on the committed real traces are byte-identical to the references (see reference_reports.py).

A failure means the report changed. If that was the intent, regenerate the references in the same
commit (``.venv/bin/python tests/reference_reports.py --write``) so that the review shows the Markdown
diff; if not (a performance change, a refactoring), the change altered what users read: fix it.
"""
from __future__ import annotations

import pytest
from reference_reports import cases, compare, load_index, render_case

CASES = cases()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_report_matches_reference(case):
    problems = list(compare(case, render_case(case), load_index()))
    assert not problems, "\n".join(problems) + (
        "\n(if the change is meant: .venv/bin/python tests/reference_reports.py --write, commit the result)")
