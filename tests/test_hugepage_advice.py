"""The command turns numpy's huge-page advice off where the kernel would compact memory synchronously on
a page fault (analyzer.resources.avoid_hugepage_stalls), and only there."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.resources import avoid_hugepage_stalls

try:
    from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def advice():
    """numpy's setting, restored after the test (it is process-wide)."""
    before = _get_madvise_hugepage()
    _set_madvise_hugepage(True)
    yield
    _set_madvise_hugepage(before)


@pytest.mark.parametrize(("modes", "turned_off"), [
    ("always defer defer+madvise [madvise] never\n", True),
    ("[always] defer defer+madvise madvise never\n", True),
    ("always defer [defer+madvise] madvise never\n", True),
    ("always [defer] defer+madvise madvise never\n", False),
    ("always defer defer+madvise madvise [never]\n", False),
    ("garbage\n", False),
])
def test_advice_off_only_with_synchronous_compaction(tmp_path, monkeypatch, advice, modes, turned_off):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    defrag = tmp_path / "defrag"
    defrag.write_text(modes)
    assert avoid_hugepage_stalls(str(defrag)) is turned_off
    assert bool(_get_madvise_hugepage()) is not turned_off


def test_user_choice_and_missing_file_left_alone(tmp_path, monkeypatch, advice):
    defrag = tmp_path / "defrag"
    defrag.write_text("always defer defer+madvise [madvise] never\n")
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    assert not avoid_hugepage_stalls(str(defrag))
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE")
    assert not avoid_hugepage_stalls(str(tmp_path / "absent"))
    assert _get_madvise_hugepage()


def test_the_command_applies_it():
    """``analyze`` (the click group every command passes) calls it: numpy's advice is off after it where
    the machine's mode compacts synchronously, as it was elsewhere."""
    code = ("from analyzer.cli import cli\n"
            "from analyzer.resources import THP_DEFRAG, SYNC_COMPACTION\n"
            "try:\n    from numpy._core.multiarray import _get_madvise_hugepage as get\n"
            "except ImportError:\n    from numpy.core.multiarray import _get_madvise_hugepage as get\n"
            "before = bool(get())\n"
            "cli.main(args=['rules', 'list'], prog_name='analyze', standalone_mode=False)\n"
            "try:\n    mode = [w[1:-1] for w in open(THP_DEFRAG).read().split() if w.startswith('[')][0]\n"
            "except (OSError, IndexError):\n    mode = None\n"
            "print('RESULT', before, mode in SYNC_COMPACTION, bool(get()))\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    before, sync, after = (w == "True" for w in out.split("RESULT")[1].split())
    assert after is (before and not sync)


def test_before_numpy_is_imported(tmp_path):
    """Called before numpy is imported (``analyze --help`` imports none), it imports none either: it sets
    ``NUMPY_MADVISE_HUGEPAGE=0``, which numpy then reads when the command imports it."""
    defrag = tmp_path / "defrag"
    defrag.write_text("always defer defer+madvise [madvise] never\n")
    code = ("import os, sys\n"
            "from analyzer.resources import avoid_hugepage_stalls\n"
            f"done = avoid_hugepage_stalls({str(defrag)!r})\n"
            "imported = 'numpy' in sys.modules\n"
            "try:\n    from numpy._core.multiarray import _get_madvise_hugepage as get\n"
            "except ImportError:\n    from numpy.core.multiarray import _get_madvise_hugepage as get\n"
            "print('RESULT', done, imported, os.environ['NUMPY_MADVISE_HUGEPAGE'], bool(get()))\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split("RESULT")[1].split() == ["True", "False", "0", "False"]
