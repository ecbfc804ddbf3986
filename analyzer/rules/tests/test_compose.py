"""Packs that compose (``extends``, ``disable``/``enable``, ``override``, several ``--rules``) and rule
selection (``--select`` / ``--extend-select`` / ``--ignore`` layers), against the built-in pack and the
real fact registry. The same packs run on real traces in ``tests/test_team_setup.py``."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from analyzer.errors import ParameterError, RuleError
from analyzer.rules import DEFAULT_PACK, load_pack, validate_pack
from analyzer.rules.selection import RuleSettings, SelectorError, apply_settings, matches, split_selectors

CUSTOM_RULE = """\
  - id: TEAM001
    name: sync-heavy-ranges
    title: NVTX ranges that synchronize with the GPU often
    category: sync
    severity: warning
    scope: nvtx_range
    source: sync_calls
    parameters:
      max_per_range:
        default: 4
        unit: count
        doc: synchronizations one range instance may make
    where: blocking
    let:
      calls: count()
      per_range: calls / nunique(nvtx_id)
    condition: per_range > max_per_range
    impact: sum(duration)
    message: "{{ nvtx_path }} synchronizes {{ per_range | round(1) }} times per instance"
    what: The host waits for the GPU many times inside one NVTX range.
    why: Each synchronization drains the GPU's queue.
    fix: Keep values on the GPU until the end of the step.
"""


@pytest.fixture(scope="module")
def default():
    return load_pack(DEFAULT_PACK)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def errors(refs) -> list[str]:
    pack, problems = validate_pack(refs)
    assert pack is None and problems
    return [str(p) for p in problems]


def test_extends_default_plus_a_rule(tmp_path, default):
    team = write(tmp_path, "team.yaml", "version: 1\nextends: default\nrules:\n" + CUSTOM_RULE)
    pack = load_pack(team)
    assert [r.name for r in pack.rules] == [r.name for r in default.rules] + ["sync-heavy-ranges"]
    assert pack.files == (str(DEFAULT_PACK), str(team))
    assert pack.get("TEAM001").file == str(team) and pack.get("gpu-idle-gaps").file == str(DEFAULT_PACK)


def test_disable_enable_and_override(tmp_path, default):
    base = write(tmp_path, "base.yaml", """\
        version: 1
        extends: default
        disable: [tiny-kernels, NCU]      # a name and an id prefix
        override:
          gpu-idle-gaps:
            severity: error
            parameters: {min_gap: 2ms}
          GPU002:                          # by id
            parameters: {max_busy: 30%}
        """)
    pack = load_pack(base)
    off = {r.name for r in pack.disabled}
    assert "tiny-kernels" in off and {r.id for r in pack.disabled if r.id.startswith("NCU")} == {
        f"NCU{i:03d}" for i in range(1, 11)}
    assert len(pack.rules) + len(pack.disabled) == len(default.rules)
    assert pack.reasons["LNC001"] == f"disable tiny-kernels ({base}:3)"
    idle = pack.get("gpu-idle-gaps")
    assert str(idle.severity) == "error" and idle.params["min_gap"] == 2_000_000
    assert idle.parameter("min_gap").text == "2ms" and idle.parameter("min_gap").default == 1_000_000
    assert pack.get("low-gpu-utilization").params["max_busy"] == pytest.approx(0.3)
    # a pack extending that one switches a rule back on
    child = write(tmp_path, "child.yaml", "version: 1\nextends: base.yaml\nenable: [small-grid-measured]\n")
    assert load_pack(child).is_enabled("small-grid-measured")
    assert not load_pack(child).is_enabled("tiny-kernels")


def test_several_packs_compose_in_order_and_shared_bases_are_read_once(tmp_path, default):
    a = write(tmp_path, "a.yaml", "version: 1\nextends: default\noverride:\n  gpu-idle-gaps:\n"
                                  "    parameters: {min_gap: 2ms}\n")
    b = write(tmp_path, "b.yaml", "version: 1\nextends: default\noverride:\n  gpu-idle-gaps:\n"
                                  "    parameters: {min_gap: 5ms}\nrules:\n" + CUSTOM_RULE)
    pack = load_pack([a, b])  # both extend default: it is read once, no "defined twice"
    assert len(pack.rules) == len(default.rules) + 1
    assert pack.get("gpu-idle-gaps").params["min_gap"] == 5_000_000  # the later pack wins
    assert load_pack([b, a]).get("gpu-idle-gaps").params["min_gap"] == 2_000_000
    # ``default`` named on the command line, then a file without extends: the same result
    extra = write(tmp_path, "extra.yaml", "version: 1\nrules:\n" + CUSTOM_RULE)
    assert [r.name for r in load_pack(["default", extra]).rules] == [r.name for r in pack.rules]


def test_a_rule_defined_twice_names_both_files(tmp_path):
    one = write(tmp_path, "one.yaml", "version: 1\nrules:\n" + CUSTOM_RULE)
    two = write(tmp_path, "two.yaml", "version: 1\nextends: default\nrules:\n" + CUSTOM_RULE)
    [message] = errors([one, two])
    assert message.startswith(f"{two}:4: ") and f"(first at {one}:3)" in message
    assert 'rule "sync-heavy-ranges" (TEAM001) is defined twice' in message and "override:" in message
    clash = write(tmp_path, "clash.yaml", "version: 1\nextends: default\nrules:\n"
                  + CUSTOM_RULE.replace("sync-heavy-ranges", "gpu-idle-gaps"))
    [message] = errors(clash)
    assert message.startswith(f"{clash}:4: ") and 'duplicate rule name "gpu-idle-gaps"' in message
    assert f"(first defined at {DEFAULT_PACK}:9)" in message


def test_validation_names_file_line_and_suggests(tmp_path):
    bad = write(tmp_path, "bad.yaml", """\
        version: 1
        extends: [default, missing.yaml]
        disable: [tiny-kernal]
        override:
          gpu-idle-gap:
            severity: error
          low-gpu-utilization:
            severity: critical
            paramters: {}
            parameters:
              max_bsy: 30%
              min_idle: fast
        """)
    found = errors(bad)
    expect = [
        (2, 'rule pack "', "missing.yaml", "relative to the file that names them"),
        (3, '"tiny-kernal" is not a rule name, id or category', 'did you mean "tiny-kernels"?', ""),
        (5, 'override names unknown rule "gpu-idle-gap"', 'did you mean "gpu-idle-gaps"?', ""),
        (9, 'unknown key "paramters" in override.low-gpu-utilization', 'did you mean "parameters"?', ""),
        (8, "unknown severity 'critical'", "", ""),
        (11, 'no parameter "max_bsy"', 'did you mean "max_busy"?', ""),
        (12, "cannot read 'fast' as a duration", "", ""),
    ]
    assert len(found) == len(expect), found
    for message, (line, *words) in zip(found, expect):
        assert message.startswith(f"{bad}:{line}: "), message
        assert all(w in message for w in words), message
    typo = write(tmp_path, "typo.yaml", "version: 1\nextend: default\n")
    assert 'unknown key "extend" in the rule file; did you mean "extends"?' in errors(typo)[0]


def test_extends_cycle_and_bad_shapes(tmp_path):
    write(tmp_path, "a.yaml", "version: 1\nextends: b.yaml\n")
    write(tmp_path, "b.yaml", "version: 1\nextends: a.yaml\n")
    [message] = errors(tmp_path / "a.yaml")
    assert "cycle" in message and message.startswith(f"{tmp_path / 'b.yaml'}:2: ")
    shapes = write(tmp_path, "shapes.yaml", "version: 1\nextends: {default: 1}\n")
    assert "extends must be a list of text" in errors(shapes)[0]
    override = write(tmp_path, "override.yaml", "version: 1\nextends: default\noverride: [gpu-idle-gaps]\n")
    assert "override: must map rule names" in errors(override)[0]
    assert "does not exist" in errors(tmp_path / "nope.yaml")[0]


def test_hostile_content_in_an_extended_pack_stops_everything(tmp_path):
    write(tmp_path, "evil.yaml", 'version: 1\nrules: !!python/object/apply:os.system ["echo pwned"]\n')
    team = write(tmp_path, "team.yaml", "version: 1\nextends: evil.yaml\n")
    pack, problems = validate_pack(team)
    assert pack is None and len(problems) == 1 and "YAML tag not allowed" in str(problems[0])


# -- selection ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("selector, expected", [
    ("gpu-idle-gaps", {"GPU001"}),
    ("gpu001", {"GPU001"}),
    ("GPU", {"GPU001", "GPU002", "GPU003", "GPU004", "GPU005"}),
    ("utilization", {"GPU001", "GPU002", "GPU003", "GPU004"}),
    ("ncu-*", set()),
    ("*-measured", {"NCU001", "NCU005", "NCU006", "KRN004"}),
    ("NCU00?", {f"NCU00{i}" for i in range(1, 10)}),
    ("memory-bound*", {"KRN001", "NCU001", "NCU002"}),
])
def test_selectors(default, selector, expected):
    assert {r.id for r in default.rules if matches(selector, r)} == expected


def test_selection_layers_like_ruff(default):
    config = RuleSettings(ignore=("tiny-kernels", "NCU"), origin={"ignore": "pyproject.toml:7"})
    pack = apply_settings(default, [config])
    assert not pack.is_enabled("tiny-kernels") and not pack.is_enabled("NCU004")
    assert pack.reasons["LNC001"] == "ignore tiny-kernels (pyproject.toml:7)"
    # --ignore on the command line adds to the file's ignore
    pack = apply_settings(default, [config, RuleSettings(ignore=("gpu-idle-gaps",))])
    assert not pack.is_enabled("tiny-kernels") and not pack.is_enabled("gpu-idle-gaps")
    assert pack.reasons["GPU001"] == "ignore gpu-idle-gaps (--ignore)"
    # --select starts over; --extend-select adds one back
    pack = apply_settings(default, [config, RuleSettings(select=("utilization",))])
    assert {r.name for r in pack.rules} == {"gpu-idle-gaps", "low-gpu-utilization", "low-sm-activity",
                                            "host-work-in-loop"}
    pack = apply_settings(default, [config, RuleSettings(extend_select=("tiny-kernels",))])
    assert pack.is_enabled("tiny-kernels") and not pack.is_enabled("NCU004")
    # --set reaches a rule that is switched off; values apply file first, then command line
    pack = apply_settings(default, [
        RuleSettings(sets=("tiny-kernels.tiny=5us", "gpu-idle-gaps.min_gap=3ms"), ignore=("tiny-kernels",)),
        RuleSettings(sets=("gpu-idle-gaps.min_gap=4ms",)),
    ])
    assert pack.get("tiny-kernels").params["tiny"] == 5_000 and not pack.is_enabled("tiny-kernels")
    assert pack.get("gpu-idle-gaps").params["min_gap"] == 4_000_000
    assert split_selectors(["a,b", " c ", ""]) == ("a", "b", "c")


def test_selection_errors_name_where_they_were_written(default):
    with pytest.raises(SelectorError) as err:
        apply_settings(default, [RuleSettings(ignore=("tiny-kernal",), origin={"ignore": "pyproject.toml:7"})])
    assert str(err.value).startswith('pyproject.toml:7: "tiny-kernal" is not a rule name')
    assert 'did you mean "tiny-kernels"?' in str(err.value)
    with pytest.raises(SelectorError, match=r"^--select: \"gpu-idle\""):
        apply_settings(default, [RuleSettings(select=("gpu-idle",))])
    # a glob or a known category that picks nothing is not an error (a shared configuration)
    apply_settings(default, [RuleSettings(ignore=("team-*", "communication"))])
    with pytest.raises(ParameterError, match=r"^pyproject.toml:9: set gpu-idle-gaps.min_gap=fast: "):
        apply_settings(default, [RuleSettings(sets=("gpu-idle-gaps.min_gap=fast",),
                                              origin={"sets": "pyproject.toml:9"})])
    assert isinstance(SelectorError("x"), RuleError)
