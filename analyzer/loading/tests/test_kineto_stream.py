"""The streaming torch.profiler reader: chunk by chunk, the same trace model as decoding the file whole.

Real traces (``tests/data``) are read with small blocks, so they are cut into many chunks, and compared
frame by frame with the whole-file decode; re-serialized copies (compact, bare event list) and copies
with names full of separators check the cut guesses; damaged copies must give the whole-file path's
one line. Hand-edited JSON appears only as damaged or hostile input, never as evidence about a trace.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from analyzer.errors import InputError
from analyzer.loading.kineto import document
from analyzer.loading.kineto.document import EventStream, StreamFallback
from analyzer.loading.kineto.loader import _KinetoLoader
from analyzer.testing import DATA_DIR

TRACES = [DATA_DIR / "round3" / "copy_on_compute_stream.pt.trace.json.gz",
          DATA_DIR / "public" / "hta_alexnet_single_pass.pt.trace.json.gz",
          DATA_DIR / "kineto" / "alloc_churn.pt.trace.json.gz"]
FRAMES = ("kernels", "memcpy", "memset", "api", "sync", "nvtx", "gpus", "processes", "threads", "stacks",
          "api_stacks", "memory")


def _text(path: Path) -> bytes:
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return gzip.decompress(path.read_bytes())


def _load(path: Path, *, whole: bool, monkeypatch: pytest.MonkeyPatch, block: int = 8192):
    """(trace, messages) through the streaming path with ``block``-byte blocks, or the whole-file one."""
    messages: list[str] = []
    with monkeypatch.context() as m:
        m.setattr(document, "_BLOCK", block)
        if whole:
            def refuse(self, add):
                raise StreamFallback
            m.setattr(EventStream, "read", refuse)
        trace = _KinetoLoader(path, messages.append, None, "kineto-json").run()
    return trace, messages


def _same(a, b) -> None:
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    assert replace(a.info, path=Path()) == replace(b.info, path=Path())
    assert a.extras == b.extras


def _streamed(messages: list[str]) -> bool:
    return any("in chunks" in m for m in messages)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_many_small_chunks_equal_the_whole_file(path, monkeypatch, tmp_path):
    plain = tmp_path / path.name.removesuffix(".gz")
    plain.write_bytes(_text(path))
    chunks: list[int] = []
    real_add = EventStream.read

    def counting(self, add):
        return real_add(self, lambda events: (chunks.append(len(events)), add(events)))

    monkeypatch.setattr(EventStream, "read", counting)
    streamed, messages = _load(plain, whole=False, monkeypatch=monkeypatch)
    monkeypatch.undo()
    whole, _ = _load(plain, whole=True, monkeypatch=monkeypatch)
    assert _streamed(messages) and len(chunks) > 3
    _same(streamed, whole)
    gz, gz_messages = _load(path, whole=False, monkeypatch=monkeypatch, block=4 << 20)  # as shipped, one block
    assert _streamed(gz_messages)
    _same(gz, whole)


def test_events_longer_than_a_block_grow_the_pending_text(monkeypatch):
    """Blocks of 64 bytes, shorter than any event: the text not yet decoded outgrows its buffer again
    and again (kept between cuts, not given back) and the trace is still the whole file's."""
    path = TRACES[0]
    _text(path)
    streamed, messages = _load(path, whole=False, monkeypatch=monkeypatch, block=64)
    whole, _ = _load(path, whole=True, monkeypatch=monkeypatch)
    assert _streamed(messages)
    _same(streamed, whole)


@pytest.mark.parametrize("layout", ["compact", "bare-list", "events-first", "crlf-indented"])
def test_other_writers_layouts_stream_to_the_same_trace(layout, monkeypatch, tmp_path):
    doc = json.loads(_text(TRACES[0]))
    if layout == "compact":
        text = json.dumps(doc, separators=(",", ":"))
    elif layout == "bare-list":  # Chrome's JSON array format: the events only (no deviceProperties)
        text = json.dumps(doc["traceEvents"])
    elif layout == "events-first":
        text = json.dumps({"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}})
    else:
        text = json.dumps(doc, indent=3).replace("\n", "\r\n")
    path = tmp_path / "t.pt.trace.json"
    path.write_text(text)
    streamed, messages = _load(path, whole=False, monkeypatch=monkeypatch)
    whole, _ = _load(path, whole=True, monkeypatch=monkeypatch)
    assert _streamed(messages)
    _same(streamed, whole)


def test_names_full_of_separators_are_not_cut(monkeypatch, tmp_path):
    """Kernel and range names holding ``}, {``, ``]`` and a quoted ``"traceEvents": [`` (escaped in
    the JSON text) make wrong cut guesses that the decode refuses; the trace is still the same."""
    doc = json.loads(_text(TRACES[0]))
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") == "X" and i % 3 == 0:
            e["name"] = e["name"] + ' }, {"x": [1]}, ] "traceEvents": [ \\'
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(doc, indent=1))
    streamed, messages = _load(path, whole=False, monkeypatch=monkeypatch, block=1024)
    whole, _ = _load(path, whole=True, monkeypatch=monkeypatch)
    assert _streamed(messages)
    _same(streamed, whole)
    assert streamed.kernels["name"].str.contains('"traceEvents"', regex=False).any()


@pytest.mark.parametrize("damage", ["truncated", "trailing-comma", "garbage-after", "second-events-list",
                                    "broken-event", "not-an-object"])
def test_damaged_files_get_the_whole_file_error(damage, monkeypatch, tmp_path):
    text = json.dumps(json.loads(_text(TRACES[0])), indent=1)
    if damage == "truncated":
        text = text[: len(text) // 2]
    elif damage == "trailing-comma":
        i = text.rindex("}\n ]")
        text = text[: i + 1] + "," + text[i + 1:]
    elif damage == "garbage-after":
        text += "\n{}"
    elif damage == "second-events-list":
        text = text[:-1] + ', "traceEvents": []}'
    elif damage == "broken-event":
        i = text.index('"ph"', len(text) // 2)
        text = text[:i] + '"ph" "X", ' + text[i:]
    else:
        i = text.index("{", text.index('"traceEvents"'))
        text = text[:i] + "5, " + text[i:]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(text)
    outcomes = []
    for whole in (False, True):
        try:
            trace, _ = _load(path, whole=whole, monkeypatch=monkeypatch)
            outcomes.append(("trace", len(trace.kernels), len(trace.api)))
        except InputError as err:
            outcomes.append(("error", str(err)))
    assert outcomes[0] == outcomes[1]
    if damage == "second-events-list":  # json and msgspec keep the last: an empty trace
        assert outcomes[0][0] == "error"


def test_memory_holds_a_chunk_not_the_file(monkeypatch, tmp_path):
    """What is decoded at once is about one block of text, however long the file: every chunk handed
    to the decoder is at most the pending text plus one block, and the text is never read whole."""
    text = _text(TRACES[0])
    path = tmp_path / "t.pt.trace.json"
    path.write_bytes(text)
    sizes: list[int] = []
    real = document._decode_chunk

    def measured(chunk: bytes):
        sizes.append(len(chunk))
        return real(chunk)

    def whole(*_args, **_kwargs):
        raise AssertionError("the file was read whole")

    monkeypatch.setattr(document, "_decode_chunk", measured)
    monkeypatch.setattr(document, "read_json_bytes", whole)
    monkeypatch.setattr("analyzer.loading.kineto.loader.read_json_bytes", whole)
    block = 16 * 1024
    trace, messages = _load(path, whole=False, monkeypatch=monkeypatch, block=block)
    assert _streamed(messages) and len(trace.kernels)
    assert len(sizes) > len(text) // (2 * block)
    assert max(sizes) <= 2 * block + 2  # a block, the text left after the last cut, the brackets

