"""What the README says of setup.cfg is setup.cfg. The architecture table is the layer contract (what
lint-imports enforces): every layer above the base modules is named, each row's modules share one layer,
and the rows run from the top layer down; the table fell behind once (analyzer/resources.py moved under
loading; analyzer/api.py and analyzer/fuzz/ were not named). The core install's packages are the
install_requires (google-re2 and adbc-driver-sqlite were missing from the README's list)."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    return cfg


def _contract_layers() -> list[set[str]]:
    """setup.cfg's layers, top first: the module names of each line (``a | b`` and ``a : b`` alike)."""
    layers = _setup_cfg()["importlinter:contract:layers"]["layers"]
    lines = [ln.strip() for ln in layers.splitlines() if ln.strip()]
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


def test_readme_core_install_lists_the_install_requires():
    requires = _setup_cfg()["options"]["install_requires"]
    names = {re.match(r"[A-Za-z0-9_.-]+", ln.strip()).group(0).lower() for ln in requires.splitlines()
             if ln.strip() and not ln.strip().startswith("#") and "python_version" not in ln}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"pip install -e \.\s+# core: (.*)$", readme, re.M).group(1)
    assert {n.strip().lower() for n in listed.split(",")} == names
