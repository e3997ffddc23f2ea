"""The algorithm contract (DESIGN.md §3): one class per algorithm, one base class per group.

This module sits below every layer that names algorithms (config, algorithms, experiments, the razor
builder): it holds the groups, the save kinds, the base class and the read-only config view an algorithm
receives. It imports nothing of slimkit above ``core``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import torch

from slimkit.core.groups import GROUPS as GROUPS  # re-exported: contract.GROUPS is what importers name
from slimkit.core.groups import KIND_OF_GROUP
from slimkit.core.hyperparameters import Hyperparameter


class SmashConfigPrefixWrapper:
    """Read-only view of a SmashConfig in which one algorithm's hyperparameters are read without the prefix.

    ``view["sparsity"]`` reads ``config["l1_filter_sparsity"]`` for prefix ``"l1_filter"``; any other attribute
    (``data``, ``tokenizer``, ``example_inputs``, ``device``...) is the config's own. ``state`` collects the
    JSON-able replay record an algorithm writes during apply (saved with the model).
    """

    def __init__(self, config: Any, prefix: str) -> None:
        self._config = config
        self._prefix = prefix
        #: JSON-able replay state an algorithm records during apply (saved with the model).
        self.state: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        return self._config[f"{self._prefix}_{key}"]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._config, attr)


class SaveFn(str, Enum):
    """How a model smashed by an algorithm is saved and rebuilt (DESIGN.md §4).

    - ``KEEP``: the weights after the algorithm load into the rebuilt base model as they are.
    - ``REPLAY``: on load, ``replay()`` rebuilds the structure (shrunk layers, int8 modules, a dtype) on the
      fresh base model, then the saved weights load strictly.
    - ``REAPPLY``: the algorithm's change is not in the weights (a helper, a hook); it is applied again on load.
    - ``SAVE_BEFORE_APPLY``: the model is saved as it was before the algorithm (e.g. compilation), and the
      algorithm and every later one are applied again on load.
    - ``ARTIFACTS``: the algorithm's output is self-contained files (e.g. an ONNX graph with every earlier
      algorithm baked in). Saving calls ``save_artifacts()`` instead of writing torch weights; loading calls
      ``load_artifacts()`` and needs no base model. Nothing may be applied after such an algorithm (the
      registry requires ``compatible_algorithms`` to be ``[]`` for every later group).
    """

    KEEP = "keep"
    REPLAY = "replay"
    REAPPLY = "reapply"
    SAVE_BEFORE_APPLY = "save_before_apply"
    ARTIFACTS = "artifacts"


@dataclass(frozen=True)
class LayerResult:
    """What a weight quantizer leaves where each layer it takes was; checkpoint formats say which results they hold.

    ``kind`` ``"packed"``: slimkit's PackedLinear, ``w = (q - z) * s`` per row group, its bits, group size and
    symmetry being the run's ``bits`` / ``group_size`` / ``sym`` hyperparameters. ``integer_zeros``: whether the
    zero points are whole codes (False: fitted fractions). ``input_scale_unless``: the boolean hyperparameter
    without which some layers keep a scale on their input (None: never).
    """

    kind: str = "packed"
    integer_zeros: bool = True
    input_scale_unless: str | None = None


class SlimkitAlgorithm(ABC):
    """Base of every smash algorithm. Subclasses set the class attributes and implement ``_apply``."""

    algorithm_name: ClassVar[str]
    group: ClassVar[str]
    references: ClassVar[dict[str, str]] = {}
    tokenizer_required: ClassVar[bool] = False
    processor_required: ClassVar[bool] = False
    dataset_required: ClassVar[bool] = False
    #: uses ``cfg.data`` when there is one (e.g. calibration), else falls back to example inputs; faces that
    #: know a model's natural data (the CLI, experiments) then supply it
    dataset_used: ClassVar[bool] = False
    run_on_cpu: ClassVar[bool] = True
    run_on_cuda: ClassVar[bool] = True
    #: group -> list of algorithm names this one combines with, or "*" (default: every group is "*").
    compatible_algorithms: ClassVar[dict[str, list[str] | str]] = {}
    save_fn: ClassVar[SaveFn] = SaveFn.KEEP
    #: ``replay()`` works on a base whose parameters are on the meta device (it only swaps or casts modules and
    #: reads no weight values), so a reload may skip building the fp32 weights. Set True only once verified.
    replay_on_meta: ClassVar[bool] = False
    #: pip extra that provides the optional packages ``import_algorithm_packages`` needs ("" when none).
    extra: ClassVar[str] = ""
    #: Other names that resolve to this algorithm on every face: NNI / Auptimizer class names
    #: (``"L1FilterPruner"``), short experiment names (``"apoz"``), retired names whose saves still load.
    aliases: ClassVar[tuple[str, ...]] = ()
    #: The engine class behind the algorithm's NNI face (``L1FilterPruner``, ``QATQuantizer``), when it has
    #: one: experiments and ``create_compressor`` build it on a model with a ``config_list``.
    engine: ClassVar[type | None] = None
    #: Keyword arguments the experiment face passes to ``engine`` unless the user sets them, so that one
    #: name behaves the same on every face (e.g. dependency-aware filter pruning when an input is given).
    engine_defaults: ClassVar[dict[str, Any]] = {}
    #: Retired hyperparameter names of an alias: ``{alias: {old_name: new_name}}``, so old configs and
    #: saves written under the alias read as this algorithm's hyperparameters.
    renamed_hyperparameters: ClassVar[dict[str, dict[str, str]]] = {}
    #: Hyperparameters an alias sets when it activates the algorithm (unless the config already sets them):
    #: ``{"text_to_text_lora": {"lora_rank": 8}}`` makes Pruna's LoRA recoverer name mean fine-tuning with LoRA.
    alias_defaults: ClassVar[dict[str, dict[str, Any]]] = {}
    #: Other tools' names for algorithms slimkit does not have but that this one comes closest to (Pruna's
    #: ``hqq_diffusers`` -> ``hqq``). They are not aliases: using one is an error that names this algorithm.
    near_names: ClassVar[tuple[str, ...]] = ()
    #: The output format a streaming smash (a model read from its files one decoder block at a time) writes when
    #: this algorithm is active, e.g. ``"gguf"`` for an exporter whose result is that file; None: no say.
    stream_format: ClassVar[str | None] = None
    #: What a weight quantizer turns the layers it takes into (:class:`LayerResult`), for checkpoint formats to
    #: judge a recipe by; None: the algorithm makes no layer a checkpoint format could hold.
    produces: ClassVar[LayerResult | None] = None

    def get_hyperparameters(self) -> list[Hyperparameter]:
        """Return the algorithm's ConfigSpace hyperparameters (each with ``meta={"desc": ...}``)."""
        return []

    def model_check_fn(self, model: Any) -> bool:
        """Whether the algorithm supports ``model`` (smash refuses others unless ``experimental=True``)."""
        return isinstance(model, torch.nn.Module)

    def model_check_reason(self) -> str:
        """One sentence saying which models the algorithm supports, used in the refusal message."""
        return "It supports any torch.nn.Module."

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import and return the optional packages the algorithm needs (lazy, so slimkit imports fast)."""
        return {}

    @abstractmethod
    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        """Apply the algorithm and return the smashed model. Hyperparameters are read un-prefixed."""

    def apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        """Apply the algorithm (entry point used by smash and by reload)."""
        return self._apply(model, smash_config)

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        """The per-block worker of a streaming smash, or None when the algorithm cannot run one block at a time.

        ``model`` is the skeleton (architecture with parameters on the meta device, read-only here). A quantizer
        returns a :class:`slimkit.engines.quantization.lowbit.blockwise.BlockStep`; an algorithm that only
        chooses the output (``stream_format``) returns None and still takes part.
        """
        return None

    def stream_finish(self, smash_config: SmashConfigPrefixWrapper, summary: dict[str, Any]) -> None:
        """Record the replay state of a streaming smash in ``smash_config.state`` (as ``_apply`` would).

        ``summary["specs"]`` holds the specs the block steps returned, ``summary["writer"]`` what the output
        writer reported (file names, sizes, types), ``summary["model"]`` the skeleton, ``summary["targets"]`` the
        skeleton's :class:`slimkit.core.weights.Target` list found before quantizing (for the coverage record).
        """
        return None

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the algorithm's structural change on a fresh base model before weights load (``REPLAY``)."""
        raise NotImplementedError(f"{self.algorithm_name} declares save_fn=REPLAY but does not implement replay().")

    def save_artifacts(self, model: Any, directory: Path, state: dict[str, Any]) -> None:
        """Write the smashed ``model``'s own files into ``directory`` (``ARTIFACTS``); ``state`` is its apply record.

        ``directory`` is the save's temporary folder, renamed into place once everything is written.
        """
        raise NotImplementedError(
            f"{self.algorithm_name} declares save_fn=ARTIFACTS but does not implement save_artifacts()."
        )

    def load_artifacts(self, directory: Path, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the smashed model from the files :meth:`save_artifacts` wrote (``ARTIFACTS``), without a base model.

        Raise :class:`slimkit.errors.SaveLoadError` naming the file when one is missing or unreadable.
        """
        raise NotImplementedError(
            f"{self.algorithm_name} declares save_fn=ARTIFACTS but does not implement load_artifacts()."
        )

    @classmethod
    def kind(cls) -> str:
        """The experiment ``"type"`` this algorithm belongs to (``"pruning"``, ``"quantization"``, ...)."""
        return KIND_OF_GROUP[cls.group]

    @classmethod
    def description(cls) -> str:
        """First paragraph of the class docstring: what the algorithm does."""
        doc = inspect.getdoc(cls) or ""
        return doc.split("\n\n")[0].replace("\n", " ").strip()

    @classmethod
    def hyperparameter_defaults(cls) -> dict[str, Any]:
        """Un-prefixed hyperparameter name -> default value."""
        return {hp.name: hp.default_value for hp in cls().get_hyperparameters()}

    @classmethod
    def effective_hyperparameters(cls, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` (un-prefixed, defaults filled) as the algorithm acts on them.

        A preset such as a scheme name is expanded into the settings it stands for; identity unless an algorithm
        has presets.
        """
        return values


class SlimkitPruner(SlimkitAlgorithm):
    """Removes weights, channels or heads."""

    group = "pruner"


class SlimkitDistiller(SlimkitAlgorithm):
    """Trains a smaller model to mimic the original."""

    group = "distiller"


class SlimkitRecoverer(SlimkitAlgorithm):
    """Restores quality after compression (e.g. fine-tuning)."""

    group = "recoverer"


class SlimkitQuantizer(SlimkitAlgorithm):
    """Lowers the precision of weights and/or activations."""

    group = "quantizer"


class SlimkitCacher(SlimkitAlgorithm):
    """Reuses intermediate results across calls."""

    group = "cacher"
    save_fn = SaveFn.REAPPLY


class SlimkitCompiler(SlimkitAlgorithm):
    """Optimises the model's execution for the hardware."""

    group = "compiler"
    save_fn = SaveFn.SAVE_BEFORE_APPLY


class SlimkitBatcher(SlimkitAlgorithm):
    """Groups inputs to raise throughput."""

    group = "batcher"
    save_fn = SaveFn.REAPPLY
