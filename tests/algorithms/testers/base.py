"""The base tester: one subclass per algorithm declares what to run it on and how to prove it acted."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from slimkit import SmashedModel


class AlgorithmTesterBase:
    """Declarative description of how the harness exercises one algorithm."""

    algorithm: ClassVar[str]
    #: models the algorithm must smash (zoo names or names from tests/algorithms/models.py)
    models: ClassVar[list[str]] = []
    #: models its model_check_fn must refuse
    reject_models: ClassVar[list[str]] = []
    #: un-prefixed hyperparameters set for the run
    hyperparameters: ClassVar[dict[str, Any]] = {}
    #: other algorithms smashed together with this one ({group: name} plus their prefixed hyperparameters)
    extra_config: ClassVar[dict[str, Any]] = {}
    #: when set, the harness compares ``generate(**inputs, **generate_kwargs)``'s token ids instead of forward outputs
    #: (models such as CTranslate2's Whisper that decode but give no teacher-forced logits)
    generate_kwargs: ClassVar[dict[str, Any] | None] = None
    #: max |reloaded - smashed| on the example inputs (0.0 means bit-identical)
    reload_atol: ClassVar[float] = 0.0
    allow_pickle_files: ClassVar[bool] = False
    device: ClassVar[str] = "cpu"
    #: pytest marks applied to every case of this tester (e.g. "slow", "cuda")
    marks: ClassVar[list[str]] = []

    def post_smash_hook(self, smashed: SmashedModel, base: torch.nn.Module, inputs: Any) -> None:
        """Assert that the algorithm really acted on the model (override in every tester)."""
        raise NotImplementedError(f"{type(self).__name__} must prove that {self.algorithm} acted")
