"""Window selection: explicit specs, NVTX steps, periodic op sequences, errors."""
from __future__ import annotations

import pytest

from analyzer.errors import WindowError
from analyzer.facts.tests._build import trace
from analyzer.window import choose_window


def _loop(n_steps=6, warmup=True, step_name="step_{i}", setup_gap=1_000_000):
    """Setup kernels, an optional warmup range, then steps each launching the same 3 kernels."""
    ks = [{"start": 0, "end": 100, "short_name": "init_a"}, {"start": 200, "end": 300, "short_name": "init_b"}]
    nvtx = []
    t = setup_gap
    if warmup:
        nvtx.append({"start": t, "end": t + 10_000, "text": "warmup", "path": "warmup"})
        for name in ("gemm", "relu", "sum"):
            ks.append({"start": t + 100, "end": t + 2_000, "short_name": name, "api_start": t + 50})
            t += 3_000
        t = setup_gap + 10_000
    for i in range(n_steps):
        text = step_name.format(i=i)
        nvtx.append({"start": t, "end": t + 9_000, "text": text, "path": text})
        for j, name in enumerate(("gemm", "relu", "sum")):
            s = t + 500 + j * 2_500
            ks.append({"start": s, "end": s + 2_000, "short_name": name, "api_start": s - 300})
        t += 10_000
    return trace(kernels=ks, nvtx=nvtx)


def test_steps_with_warmup():
    w = choose_window(_loop())
    assert w.source == "nvtx"
    assert w.start_ns == 1_010_000 and w.end_ns == 1_010_000 + 5 * 10_000 + 9_000
    assert w.setup_ns == 1_010_000
    assert "step_0..step_5" in w.description and "warmup excluded" in w.description


def test_steps_without_warmup_skip_the_first():
    w = choose_window(_loop(warmup=False))
    assert w.start_ns == 1_000_000 + 10_000 and "first instance (step_0) skipped" in w.description


def test_unnumbered_identical_repeats_and_per_layer_names_are_not_steps():
    # identical "iteration" texts qualify; "Conv_3, Conv_7, Conv_12" (not counting up) do not
    w = choose_window(_loop(step_name="iteration"))
    assert w.source == "nvtx"
    t = _loop(warmup=False, step_name="layer_{i}")
    t.nvtx["text"] = [f"Conv_{i * 4 + 3}" for i in range(len(t.nvtx))]
    w = choose_window(t)
    assert w.source == "auto"  # falls through to the periodic detection


def test_periodic_sequence_without_nvtx():
    t = _loop(warmup=False, n_steps=10)
    t.nvtx = t.nvtx.iloc[0:0]
    w = choose_window(t)
    assert w.source == "auto" and "repeats every 3 ops" in w.description
    # steady from the second iteration: the op sequence is compared with one period earlier
    assert w.start_ns == 1_010_500 and w.setup_ns == 1_010_500


def test_periodic_sequence_with_only_zero_length_nvtx():
    """NVTX events that are all instants (no range left after dropping marks) with the default warmup
    exclusion: the periodic window as without NVTX (was an internal error; found by fuzzing a
    torch.profiler trace whose events lost their durations)."""
    t = _loop(warmup=False, n_steps=10)
    t.nvtx["end"] = t.nvtx["start"]
    w = choose_window(t, exclude=("warmup*",))
    assert w.source == "auto" and "repeats every 3 ops" in w.description


def test_no_pattern_means_whole_gpu_span():
    ks = [{"start": i * 1_000, "end": i * 1_000 + 10, "short_name": f"k{i}"} for i in range(10)]
    w = choose_window(trace(kernels=ks))
    assert (w.start_ns, w.end_ns, w.setup_ns) == (0, 9_010, 0)


@pytest.mark.parametrize("spec, start, end", [
    ("full", 0, 1_067_500),
    ("1ms:1.02ms", 1_000_000, 1_020_000),
    ("1000us:", 1_000_000, 10**10),
    (":1000100ns", 0, 1_000_100),
    ("step_[12]", 1_020_000, 1_039_000),
])
def test_explicit_specs(spec, start, end):
    w = choose_window(_loop(), spec)
    assert (w.start_ns, w.end_ns) == (start, end)


@pytest.mark.parametrize("spec, message", [
    ("2.5:7", "time spans need units"),
    ("nothing*", "matches no NVTX range"),
    ("5s:6s", "contains no GPU activity"),
    ("7ms:3ms", "end must be after the start"),
])
def test_bad_specs(spec, message):
    with pytest.raises(WindowError, match=message) as err:
        choose_window(_loop(), spec)
    assert "\n" not in str(err.value)


def test_glob_on_warmup_itself_is_honoured():
    w = choose_window(_loop(), "warmup")
    assert (w.start_ns, w.source) == (1_000_000, "nvtx")


def test_exclude_ranges_has_one_meaning_for_the_window_and_the_phase_tables():
    """``--exclude-ranges`` is parsed once (analyzer.facts.phase_index.exclude_option) and matched as
    the phase tables match it, regexes and path patterns included, on a real trace."""
    from analyzer.errors import ParameterError
    from analyzer.facts.phase_index import PhaseIndex
    from analyzer.facts.range_patterns import exclude_option
    from analyzer.loading import load_trace
    from analyzer.testing import real_trace

    assert exclude_option(None) == ("warmup*",)
    assert exclude_option(["warmup*, step_0", "re:^a{1,3}$"]) == ("warmup*", "step_0", "re:^a{1,3}$")
    assert exclude_option(["none"]) == () == exclude_option([""])
    with pytest.raises(ParameterError):
        exclude_option(["re:("])
    t = load_trace(real_trace("dataloader_starved"))
    by_glob = choose_window(t, exclude=exclude_option(["warmup*"]))
    assert (by_glob.start_ns, by_glob.description.split(",")[0]) == (8860219952, "12 NVTX steps step_0..step_11")
    by_regex = choose_window(t, exclude=exclude_option(["re:^warm"]))  # was a literal glob for the window
    assert (by_regex.start_ns, by_regex.end_ns) == (by_glob.start_ns, by_glob.end_ns)
    two = choose_window(t, exclude=exclude_option(["re:^step_[01]$"]))
    assert two.description.startswith("10 NVTX steps step_2..step_11")
    # the phase tables leave out the same ranges
    kept = set(PhaseIndex.build(t).measured_ranges(exclude_option(["re:^step_[01]$"]))["text"].astype(str))
    assert {"step_0", "step_1"}.isdisjoint(kept) and "step_2" in kept
