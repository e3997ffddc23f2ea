"""A checkpoint format as an object: its name, which kinds of layer it holds, its writer, its model-card lines.

Every format slimkit writes or reads is one :class:`CheckpointFormat` in :data:`slimkit.formats.FORMATS`. A format
judges layers by their :class:`~.kinds.LayerKind` only (:meth:`CheckpointFormat.refusals`), so the same rule
refuses a recipe before it runs (:meth:`check_recipe`, from what each quantizer declares it produces) and a model
before a file is written (:meth:`check_layers`), always naming the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.formats.kinds import FormatError, LayerKind, few_names, layer_kind, made_by, recipe_kinds
from slimkit.formats.writer import ModelWriter, WriteContext

GGUF = "gguf"
#: the model card's first "How to load" line, which each format completes
SLIMKIT_LOAD = "- **slimkit**: `SmashedModel.from_pretrained(\"DIR\")`, `slimkit serve DIR`"


def llama_cpp_line(model: nn.Module, in_slimkit: bool) -> str:
    """The card's llama.cpp line: whether (and how) ``model``'s packed layers become a GGUF file without re-quantizing.

    ``in_slimkit``: the folder is slimkit's own format (load it, then compile), else another tool's.
    """
    compiler = next(iter(made_by(GGUF)), "COMPILER")
    how = (f"`slimkit smash --model DIR --algorithm {compiler}` (or a SmashConfig with the `{compiler}` compiler) "
           "writes `model.gguf`")
    try:
        from slimkit.engines.gguf import architecture, block_type  # needs the optional gguf package
    except ImportError:  # gguf not installed: state the rule instead of checking it
        return (f"- **llama.cpp**: {how} when every packed layer is 4-bit (or 8-bit symmetric) with groups of a "
                "multiple of 32 (needs `pip install 'slimkit[llamacpp]'`).")
    try:
        architecture(model)
        types = {block_type(m, n).name for n, m in model.named_modules() if isinstance(m, PackedLinear)}
    except Exception as exc:  # noqa: BLE001 - any refusal is the answer for this line
        return f"- **llama.cpp**: not for this folder: {str(exc)[:300]}"
    kinds = ", ".join(sorted(types)) or "F32/F16"
    exact = ("the same codes and scales, no re-quantization; Q4_1 rounds each block's minimum -zero*scale to fp16, "
             "under 0.73 % of a step" if "Q4_1" in types else "bit for bit, no re-quantization")
    if in_slimkit:
        return (f"- **llama.cpp**: load this folder in slimkit and compile it with `{compiler}`: {how} ({kinds}: "
                f"{exact}).")
    return f"- **llama.cpp**: {how} from this folder ({kinds}: {exact})."


class CheckpointFormat:
    """One checkpoint format (see the module doc); subclasses set the class attributes and :meth:`refusals`."""

    #: what users pass as ``format=`` / ``--format`` and the key of the format table
    name: ClassVar[str]
    #: the model card's heading for a folder in this format
    title: ClassVar[str]
    #: the model card's ``library_name``
    library: ClassVar[str] = "slimkit"
    #: ``save_pretrained(DIR, format=name)`` writes it from any smashed model it can hold (else an algorithm's own
    #: save writes it, e.g. a compiler whose result is the file)
    exports: ClassVar[bool] = False
    #: ``SmashedModel.from_pretrained`` opens folders other tools wrote in it
    reads: ClassVar[bool] = False

    def holds(self) -> str:
        """One sentence saying what the format holds, for messages."""
        raise NotImplementedError

    def refusals(self, kind: LayerKind) -> list[str]:
        """Why the format cannot hold a layer of ``kind`` exactly (empty when it can)."""
        raise NotImplementedError

    def writer(self, stage: Path, context: WriteContext) -> ModelWriter:
        """The format's writer (open, write one piece's tensors, finish/publish) staging into ``stage``."""
        raise FormatError(f"{self.name} files are written by the algorithm whose result they are, not piece by piece.")

    def loading(self, model: nn.Module) -> list[str]:
        """The model card's "How to load" lines for ``model`` saved in this format."""
        return []

    def check_layer(self, module: nn.Module, name: str) -> None:
        """A FormatError naming layer ``name`` when the format cannot hold ``module`` exactly."""
        kind = layer_kind(module)
        problems = [] if kind is None else self.refusals(kind)
        if problems:
            raise FormatError(f"{name}: {self.name} cannot hold this layer exactly: it has {'; '.join(problems)}. "
                              f"{self.holds()}")

    def check_layers(self, model: nn.Module) -> None:
        """Refuse with ALL the layers at fault (the first few named per problem) before anything is written."""
        by_problem: dict[str, list[str]] = {}
        for name, module in model.named_modules():
            kind = layer_kind(module) if name else None
            for problem in [] if kind is None else self.refusals(kind):
                by_problem.setdefault(problem, []).append(name)
        if by_problem:
            parts = [f"{problem} ({few_names(names)})" for problem, names in by_problem.items()]
            raise FormatError(f"{self.name} cannot hold these layers exactly: {'; '.join(parts)}. {self.holds()}")

    def recipe_problems(self, smash_config: Any) -> list[str]:
        """Why the layers ``smash_config``'s quantizers will make do not fit (from what each declares it produces)."""
        return [f"{name} makes {problem}" for name, kind in recipe_kinds(smash_config).items() if kind is not None
                for problem in self.refusals(kind)]

    def check_recipe(self, smash_config: Any) -> None:
        """Refuse, before anything runs, a SmashConfig whose result this format cannot hold."""
        problems = self.recipe_problems(smash_config)
        if problems:
            raise FormatError(f"Cannot save this recipe as {self.name}: {'; '.join(problems)}. {self.holds()}")

    def check_model_recipe(self, model: nn.Module, smash_config: Any) -> None:
        """Refuse, before the quantizer runs, what only the model's shapes show (nothing by default)."""


__all__ = ["CheckpointFormat", "FormatError"]
