"""NNI 1.x's spellings of the renamed engines (``slimkit.faces.nni.v1``) speak with the name the user called.

``from slimkit.faces.nni.v1 import ADMMPruner`` is slimkit's ``ADMMEngine``; its errors and logs must say
``ADMMPruner`` (the class attribute ``user_name``), and a subclass a user writes is called by its own name.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.compression import ADMMPruner as ADMMPrunerV2
from slimkit.core import registry
from slimkit.engines.pruning import PruningConfigError
from slimkit.faces.nni import v1

RENAMED = ("ADMMPruner", "AGPPruner", "AMCPruner", "AutoCompressPruner", "FPGMPruner", "LevelPruner",
           "LotteryTicketPruner", "MovementPruner", "SimulatedAnnealingPruner", "SlimPruner")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


def test_admm_pruner_errors_name_admm_pruner():
    config = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]
    with pytest.raises(PruningConfigError, match=r"^ADMMPruner trains the model while it prunes: pass trainer=") as err:
        v1.ADMMPruner(_model(), config)
    assert "Engine" not in str(err.value)
    batches = [(torch.rand(2, 1, 8, 8), torch.tensor([0, 1]))]
    with pytest.raises(PruningConfigError, match=r"^ADMMPruner num_iterations must be an int >= 1, got 0\.$"):
        v1.ADMMPruner(_model(), config, dataloader=batches, num_iterations=0)


def test_other_nni1_spellings_speak_their_name():
    config = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]
    with pytest.raises(PruningConfigError, match=r"^LotteryTicketPruner trains between rounds"):
        v1.LotteryTicketPruner(_model(), [{**config[0], "prune_iterations": 2}])
    opt_a = torch.optim.SGD(_model().parameters(), lr=0.1)
    opt_b = torch.optim.SGD(_model().parameters(), lr=0.1)
    with pytest.raises(PruningConfigError, match=r"^MovementPruner got two optimizers"):
        v1.MovementPruner(_model(), config, optimizer=opt_a, traced_optimizer=opt_b)
    for name in RENAMED:
        engine = getattr(v1, name)
        assert engine.__name__ == name.replace("Pruner", "Engine")  # the class behind the 1.x name
        assert engine.display_name() == name and registry.get(name).engine is engine


def test_subclasses_are_called_by_their_own_name():
    class MyADMM(v1.ADMMPruner):
        pass

    assert MyADMM.display_name() == "MyADMM"
    with pytest.raises(PruningConfigError, match=r"^MyADMM trains the model while it prunes"):
        MyADMM(_model(), [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    assert ADMMPrunerV2.display_name() == "ADMMPruner"  # NNI 2.x's class, a subclass of the engine
