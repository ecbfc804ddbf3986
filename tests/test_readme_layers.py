"""The README's architecture table is the layer contract of setup.cfg (what lint-imports enforces): every
layer above the base modules is named, each row's modules share one layer, and the rows run from the top
layer down. The table fell behind once (analyzer/resources.py moved under loading; analyzer/api.py and
analyzer/fuzz/ were not named)."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _contract_layers() -> list[set[str]]:
    """setup.cfg's layers, top first: the module names of each line (``a | b`` and ``a : b`` alike)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    lines = [ln.strip() for ln in cfg["importlinter:contract:layers"]["layers"].splitlines() if ln.strip()]
    return [{name.strip() for name in re.split(r"[|:]", ln)} for ln in lines]


def _readme_rows() -> list[tuple[str, list[str]]]:
    """(layer, the analyzer modules its "where" cell names) for each row of the README's architecture table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Architecture"):]
    table = section[section.index("| layer |"):]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        layer, where = (cell.strip() for cell in line.strip("|").split("|")[:2])
        rows.append((layer, re.findall(r"`analyzer/([A-Za-z_]+)(?:\.py|/)`", where)))
    return rows


def test_readme_architecture_table_is_the_layer_contract():
    layers = _contract_layers()
    index = {name: i for i, names in enumerate(layers) for name in names}
    rows = _readme_rows()
    assert len(rows) >= 10
    named: set[str] = set()
    last = -1
    for layer, modules in rows:
        if not modules:  # workloads/: outside the analyzer package
            continue
        unknown = [m for m in modules if m not in index]
        assert not unknown, f"README row {layer!r} names {unknown}, which setup.cfg places in no layer"
        levels = {index[m] for m in modules}
        assert len(levels) == 1, f"README row {layer!r} mixes layers: {sorted(modules, key=index.__getitem__)}"
        (level,) = levels
        assert level >= last, f"README row {layer!r} ({modules}) is listed below a lower layer"
        last = level
        named.update(modules)
    missing = sorted(m for names in layers[:-1] for m in names if m not in named)  # the base line: "..."
    assert not missing, f"layers of setup.cfg the README's architecture table does not name: {missing}"
