"""perfgate.util.formatting: how counts and names print in every message and report."""

from __future__ import annotations

import pytest

from perfgate.util.formatting import plural


@pytest.mark.parametrize("n, one, many, shown, text", [
    (1, "case", None, None, "1 case"),
    (0, "case", None, None, "0 cases"),
    (3, "case", None, None, "3 cases"),
    (1, "process", "processes", None, "1 process"),
    (2, "process", "processes", None, "2 processes"),
    (1.0, "kernel", None, "1", "1 kernel"),
    (2.5, "kernel", None, "2.5", "2.5 kernels"),
])
def test_a_count_and_its_noun_agree(n, one, many, shown, text):
    assert plural(n, one, many, shown=shown) == text
