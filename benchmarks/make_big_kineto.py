"""Build a large torch.profiler trace from a real one by replaying its events back to back.

    python benchmarks/make_big_kineto.py SRC.pt.trace.json[.gz] OUT.pt.trace.json --copies 50

Copy k of every timed event (``X``, flows, instants) is shifted by k times the source's span, its
correlation ids, flow ids and ``External id`` offset by k times the largest id, and ``ProfilerStep#N``
renumbered, so the result is what a k-times longer recording of the same program would look like to a
parser (same kernels, same nesting, same launch flows). Metadata (``M``) events and the document's
header are kept once. Only for benchmarks: nothing here is evidence about a program.
"""
from __future__ import annotations

import argparse
import gzip
import json
import lzma
import re
import sys
from decimal import Decimal
from pathlib import Path

import msgspec

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(path: Path) -> dict:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    elif data[:6] == b"\xfd7zXZ\x00":
        data = lzma.decompress(data)
    # every float kept as its exact JSON text (msgspec.Raw), so nanosecond decimals survive the round
    # trip; the standard library's parse_float does this on every msgspec version (msgspec 0.22 dropped
    # decode's float_hook and encode's decimal_format keyword)
    return json.loads(data, parse_float=lambda text: msgspec.Raw(text.encode()))


def _dec(value: object) -> Decimal:
    """A timestamp or duration as an exact Decimal (JSON ints, exact float text, or strings)."""
    return Decimal(bytes(value).decode() if isinstance(value, msgspec.Raw) else str(value))


def replay(src: Path, out: Path, copies: int) -> Path:
    """Write ``copies`` back-to-back replays of ``src`` to ``out``. Streams: only the source and one
    copy's events are in memory at a time (a 1 GB output needs about what the source needs)."""
    doc = _load(src)
    events = doc.pop("traceEvents")
    timed = [e for e in events if e.get("ph") != "M" and "ts" in e]
    meta = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    t0 = min(_dec(e["ts"]) for e in timed)
    t1 = max(_dec(e["ts"]) + _dec(e.get("dur", 0)) for e in timed)
    span = t1 - t0 + 1
    ids = [e.get("id") for e in timed if isinstance(e.get("id"), int)]
    ids += [e["args"].get(k) for e in timed if isinstance(e.get("args"), dict)
            for k in ("correlation", "External id", "external id") if isinstance(e["args"].get(k), int)]
    id_step = max(ids, default=0) + 1
    steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
    step_step = (max(steps) - min(steps) + 1) if steps else 0
    encoder = msgspec.json.Encoder()
    head = encoder.encode(doc)  # the other members, then traceEvents last
    with open(out, "wb") as fh:
        fh.write(head[:-1] + (b', "traceEvents": [' if len(head) > 2 else b'{"traceEvents": ['))
        first = True
        if meta:
            fh.write(encoder.encode(meta)[1:-1])
            first = False
        for k in range(copies):
            copy = [_shifted(e, span * k, id_step * k, step_step * k) if k else _shifted(e, 0, 0, 0) for e in timed]
            text = encoder.encode(copy)[1:-1]
            if text:
                fh.write((b"" if first else b",\n") + text)
                first = False
        fh.write(b"]}")
    return out


def _shifted(e: dict, shift: Decimal, id_shift: int, step_shift: int) -> dict:
    c = dict(e)
    c["ts"] = msgspec.Raw(str(_dec(e["ts"]) + shift).encode())
    if id_shift:
        if isinstance(c.get("id"), int):
            c["id"] = c["id"] + id_shift
        if isinstance(c.get("args"), dict):
            a = dict(c["args"])
            for key in ("correlation", "External id", "external id"):
                if isinstance(a.get(key), int) and a[key] > 0:
                    a[key] = a[key] + id_shift
            c["args"] = a
    if step_shift:
        m = _STEP.match(str(c.get("name", "")))
        if m:
            c["name"] = f"ProfilerStep#{int(m.group(1)) + step_shift}"
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--copies", type=int, default=10)
    args = ap.parse_args(argv)
    replay(args.src, args.out, args.copies)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:,.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
