"""The strategy registry (spade.designer.strategies): every ``designer.strategy`` value has a
strategy of that name, and an unknown name is refused naming the known ones."""

from __future__ import annotations

from typing import get_args

import pytest

from spade.config import DesignerConfig
from spade.designer.strategies import STRATEGIES, strategy_for


def test_every_configurable_strategy_is_registered_under_its_own_name():
    configurable = get_args(DesignerConfig.model_fields["strategy"].annotation)
    assert set(configurable) == set(STRATEGIES) == {"write", "edit", "splice", "scaffold"}
    for name in configurable:
        assert strategy_for(name) is STRATEGIES[name] and strategy_for(name).name == name


def test_an_unknown_strategy_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown designer strategy 'rewrite'") as err:
        strategy_for("rewrite")
    assert "valid: edit, scaffold, splice, write" in str(err.value)
