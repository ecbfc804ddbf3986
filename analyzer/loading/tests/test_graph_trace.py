"""nsys CUDA graph tables read into the trace model, and damaged ones (bad input: a real export of the
round-3 CUDA graph decode loop, tests/data/round3/decode_eager_fixed, changed in a temporary copy)."""
from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analyzer.loading import load_trace

EXPORT = Path(__file__).resolve().parents[3] / "tests" / "data" / "round3" / "decode_eager_fixed.sqlite.xz"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"


@pytest.fixture()
def export(tmp_path: Path) -> Path:
    out = tmp_path / "graphs.sqlite"
    with lzma.open(EXPORT) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _load(path: Path):
    return load_trace(path, cache=None)


def test_graph_executions_are_kernel_rows_attributed_to_their_launch(export):
    t = _load(export)
    con = sqlite3.connect(export)
    n = con.execute(f"select count(*) from {GRAPH}").fetchone()[0]
    ex = t.kernels[t.kernels["in_graph"] == 2]
    assert len(ex) == n
    assert set(ex["api_name"].astype(str)) == {"cudaGraphLaunch"}
    assert (ex["grid_x"] < 0).all() and ex["name"].astype(str).str.startswith("CUDA graph ").all()
    graph_ids = {r[0] for r in con.execute(f"select distinct graphId from {GRAPH}")}
    assert set(ex["graph_id"].astype(int)) == graph_ids
    # launched inside the program's step ranges
    assert ex["nvtx_path"].astype(str).str.startswith("step_").mean() > 0.8


def test_untimed_executions_and_executions_without_a_launch_call(export):
    con = sqlite3.connect(export)
    rows = con.execute(f"select rowid, correlationId from {GRAPH} order by start").fetchall()
    untimed = [r for r, _ in rows[:3]]
    con.execute(f"update {GRAPH} set start = 0, end = 0 where rowid in ({','.join(map(str, untimed))})")
    orphan = rows[10][1]  # its cudaGraphLaunch row removed: an execution with no launch call in the trace
    con.execute(f"delete from CUPTI_ACTIVITY_KIND_RUNTIME where correlationId = {orphan}")
    con.commit()
    con.close()
    t = _load(export)
    ex = t.kernels[t.kernels["in_graph"] == 2]
    assert len(ex) == len(rows) - 3
    assert t.extras["cuda_graphs"]["untimed"] == 3
    notes = [n for n in t.extras.get("notes", []) if "no timestamps" in n]
    assert len(notes) == 1 and "--cuda-graph-trace=node" in notes[0]
    lone = ex[ex["correlation_id"] == orphan]
    assert len(lone) == 1 and str(lone["api_name"].iloc[0]) == ""
    said = [n for n in t.extras.get("notes", []) if "no launch call" in n]
    assert len(said) == 1 and said[0].startswith("1 CUDA graph executions have no launch call")
    assert int(np.asarray(t.kernels["start"]).min()) >= 0


def test_a_trace_of_graph_executions_only_is_gpu_activity(export):
    con = sqlite3.connect(export)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables:
            con.execute(f"delete from {table}")
    con.commit()
    con.close()
    t = _load(export)
    assert len(t.kernels) and (t.kernels["in_graph"] == 2).all()


def test_an_empty_graph_table_changes_nothing(export):
    con = sqlite3.connect(export)
    con.execute(f"delete from {GRAPH}")
    con.commit()
    con.close()
    t = _load(export)
    assert (t.kernels["in_graph"] == 0).all() and t.extras.get("cuda_graphs", {}).get("executions", 0) == 0


# -- CUDA_GRAPH_EVENTS: the graphs' lifecycle ----------------------------------------------------------
EVENTS = "CUDA_GRAPH_EVENTS"


def test_graph_events_count_captures_and_date_instantiations(export):
    con = sqlite3.connect(export)
    created = con.execute(f"select count(*) from {EVENTS} where eventClass = 95").fetchone()[0]
    inst = [r[0] for r in con.execute(f"select start from {EVENTS} where eventClass = 94 order by start")]
    launch = con.execute("select min(r.start) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId "
                         "where s.value like 'cudaGraphLaunch%'").fetchone()[0]
    con.close()
    t = _load(export)
    g = t.extras["cuda_graphs"]
    assert (g["graphs_created"], g["instantiations"]) == (created, len(inst)) == (3, 1)
    assert g["executions_without_instantiation"] == 0 and not [n for n in t.extras.get("notes", []) if EVENTS in n]
    # the instantiation, on the trace's own clock: before the first replay's launch
    assert g["instantiated_at"] == [x - t.info.origin_ns for x in inst]
    assert g["instantiated_at"][0] < launch - t.info.origin_ns


def test_graph_trace_table_with_no_matching_events_is_said_once(export):
    con = sqlite3.connect(export)
    n = con.execute(f"select count(*) from {GRAPH}").fetchone()[0]
    con.execute(f"delete from {EVENTS}")
    con.commit()
    con.close()
    t = _load(export)
    assert t.extras["cuda_graphs"]["executions_without_instantiation"] == n
    said = [x for x in t.extras.get("notes", []) if EVENTS in x]
    assert len(said) == 1 and said[0].startswith(f"{n} CUDA graph executions")
    assert int((t.kernels["in_graph"] == 2).sum()) == n  # still GPU work
