"""The rule reference is generated from metadata; docs/rules.md must match the default pack."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.rules import DEFAULT_PACK, load_pack
from analyzer.rules.docgen import REPO_ROOT, render_docs

from .conftest import FACTS, SCALARS, pack_text, rule


def test_render_docs_from_metadata(write):
    tests = [{"trace": "tests/data/dataloader_starved.sqlite.xz", "expect": "fire"},
             {"trace": "tests/data/healthy.sqlite.xz", "expect": "silent", "note": "prefetching loader"}]
    pack = load_pack(write(pack_text(rule(tests=tests))), facts=FACTS, scalars=SCALARS)
    text = render_docs(pack)
    assert text.startswith("# Rule reference\n")
    assert "| [GPU001](#gpu001) | `gpu-idle-gaps` | warning | utilization | device | GPU idle between" in text
    assert "## GPU001 `gpu-idle-gaps`: GPU idle between operations" in text
    assert "| `min_gap` | `1ms` | duration | shorter gaps are launch latency |" in text
    assert "### What it detects\n\nTime when the GPU" in text
    assert "condition: share >= min_share and gaps >= 3" in text
    assert "- `tests/data/healthy.sqlite.xz`: stays silent (prefetching loader)" in text
    assert "- <https://docs.nvidia.com/nsight-systems/UserGuide/index.html>" in text
    assert render_docs(pack) == text  # deterministic


def test_docs_rules_md_is_up_to_date():
    if not DEFAULT_PACK.exists():
        pytest.skip(f"no default pack yet at {DEFAULT_PACK}")
    docs = Path(REPO_ROOT) / "docs" / "rules.md"
    expected = render_docs(load_pack(DEFAULT_PACK))
    assert docs.exists(), "docs/rules.md missing: run python -m analyzer.rules.docgen > docs/rules.md"
    assert docs.read_text() == expected, "docs/rules.md is stale: run python -m analyzer.rules.docgen > docs/rules.md"
