"""The issue's bad-input list on the smash face of the training algorithms: no data names the add_data call."""

from __future__ import annotations

import pytest

from slimkit import SmashConfig, smash, zoo
from slimkit.errors import MissingComponentError


@pytest.mark.parametrize(("name", "model"), [("finetune", "digits_cnn"), ("kd_recover", "digits_cnn"),
                                             ("width_distill", "digits_cnn"), ("layer_drop", "tiny_llama")])
def test_a_training_algorithm_without_data_names_the_add_data_call(name, model):
    with pytest.raises(MissingComponentError, match=rf"{name} needs a dataset; add one with cfg.add_data\(\.\.\.\)"):
        smash(zoo.load(model).model, SmashConfig([name]), verbose=False)
