"""Parsing a design's source on the host: no compiler warnings reach the campaign's log."""

import ast
import warnings

import pytest

from spade.pysource import parse_module

NOISY = 'import re\n\nWORD = re.compile("\\s+")\n'  # an invalid escape in a plain string


def test_a_design_that_makes_the_compiler_warn_parses_quietly():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ast.parse(NOISY)  # what the host printed before: SyntaxWarning, invalid escape
        assert any(issubclass(w.category, SyntaxWarning) for w in caught)
        caught.clear()
        tree = parse_module(NOISY)
    assert not caught and isinstance(tree.body[1], ast.Assign)


def test_parse_errors_are_ast_parses():
    with pytest.raises(SyntaxError):
        parse_module("def (:")
    with pytest.raises((SyntaxError, ValueError)):  # NUL bytes: which one depends on the Python
        parse_module("x = 1\x00")
