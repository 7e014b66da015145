"""JMESPath templating of node configs: a whole template gives a value, an inner one text."""

from __future__ import annotations

import pytest
from ezgh_engine.core.flows.templating import TemplateError, render, scope

DATA = scope({"user": {"id": 7, "name": "Ada"}}, {"start": {"n": 2}}, "trk-1")


def test_an_exact_template_takes_the_value_with_its_type() -> None:
    assert render("{{ input.user }}", DATA) == {"id": 7, "name": "Ada"}
    assert render("{{in.start.n}}", DATA) == 2
    assert render("{{ trackingId }}", DATA) == "trk-1"
    assert render("{{ input.missing }}", DATA) is None


def test_a_template_inside_a_string_is_replaced_by_its_text() -> None:
    assert render("user {{ input.user.id }} is {{ input.user.name }}", DATA) == "user 7 is Ada"
    assert render("n={{ in.start }}", DATA) == 'n={"n":2}'
    assert render("x{{ input.missing }}y", DATA) == "xy"


def test_dicts_and_lists_are_walked_and_other_values_kept() -> None:
    config = {"url": "http://127.0.0.1/u/{{ input.user.id }}", "body": ["{{ in.start.n }}", 3]}
    assert render(config, DATA) == {"url": "http://127.0.0.1/u/7", "body": [2, 3]}
    assert render(5, DATA) == 5 and render(None, DATA) is None


def test_a_broken_expression_names_itself() -> None:
    with pytest.raises(TemplateError, match=r"in\.\[\["):
        render("{{ in.[[ }}", DATA)


def test_no_python_is_evaluated() -> None:
    # JMESPath has no way to call Python: this is a literal field lookup that finds nothing.
    assert render("{{ __import__ }}", DATA) is None
