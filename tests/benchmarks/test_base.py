"""Suites by name: every name the config accepts has a module, and nothing else is found."""

from __future__ import annotations

import pytest

from spade.benchmarks.base import SUITE_NAMES, get_suite


@pytest.mark.parametrize("name", SUITE_NAMES)
def test_every_configurable_suite_resolves_to_its_module(name):
    assert get_suite(name).name == name


def test_an_unknown_suite_names_the_valid_ones():
    with pytest.raises(ValueError, match="humaneval"):
        get_suite("mmlu")
