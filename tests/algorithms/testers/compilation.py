from __future__ import annotations

import torch

from slimkit.utils import main_tensor, run_model
from tests.algorithms.testers.base import AlgorithmTesterBase


class TestTorchCompile(AlgorithmTesterBase):
    algorithm = "torch_compile"
    models = ["mlp"]
    reject_models = ["not_a_module"]
    hyperparameters = {"backend": "inductor"}
    reload_atol = 1e-5

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, torch._dynamo.eval_frame.OptimizedModule)
        with torch.no_grad():
            torch.testing.assert_close(main_tensor(run_model(smashed, inputs)), main_tensor(run_model(base, inputs)),
                                       atol=1e-5, rtol=1e-4)


class TestTorchCompileAfterInt8(TestTorchCompile):
    """Compiler saved before apply, stacked on a REPLAY quantizer: the reload replays int8 then recompiles."""

    models = ["tiny_bert"]
    hyperparameters = {"backend": "eager"}
    extra_config = {"quantizer": "int8_dynamic"}

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, torch._dynamo.eval_frame.OptimizedModule)
        assert smashed.algorithms == ["int8_dynamic", "torch_compile"]
