"""Message templates: checked when the pack loads, compiled when first rendered, picklable."""
from __future__ import annotations

import pickle

import pytest

from analyzer.rules import load_pack
from analyzer.rules.expr import ExprError
from analyzer.rules.templates import MessageTemplate, compile_template, render


def test_checked_at_load_compiled_on_first_render() -> None:
    template = compile_template("{{ n | num }} kernels{% if share > 0.5 %}, mostly tiny{% endif %}",
                                {"n", "share"})
    assert isinstance(template, MessageTemplate)
    assert template._compiled is None  # nothing compiled until a finding needs the text
    assert render(template, {"n": 12345, "share": 0.75}) == "12,345 kernels, mostly tiny"
    assert template._compiled is not None
    assert render(template, {"n": 1, "share": 0.1}) == "1 kernels"


@pytest.mark.parametrize("source", ["{{ x.__class__ }}", "{{ unknown }}", "{% for i in x %}{% endfor %}",
                                    "{{ x | nosuchfilter }}", "{{ x"])
def test_refused_at_load_not_at_render(source: str) -> None:
    with pytest.raises(ExprError):
        compile_template(source, {"x"})


def test_pickled_pack_renders_the_same() -> None:
    pack = load_pack("default")
    copy = pickle.loads(pickle.dumps(pack))
    for rule, again in zip(pack.rules, copy.rules):
        assert (rule.template is None) == (again.template is None)
        if rule.template is not None:
            assert again.template is not None and again.template.source == rule.template.source
    template = pickle.loads(pickle.dumps(compile_template("{{ x | pct }}", {"x"})))
    assert render(template, {"x": 0.25}) == "25.0%"
