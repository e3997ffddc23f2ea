"""ConfigurableDistiller: recorders on student and teacher, named losses, and which record feeds which argument.

``loss_forward_mappings`` maps each loss name to its forward arguments, each filled from a recorder::

    dict(loss_kl=dict(preds_S=dict(from_student=True, recorder="logits"),
                      preds_T=dict(from_student=False, recorder="logits")))

An argument may also name ``record_idx`` (which call), ``data_idx`` (which element of a tuple output),
``connector`` (a learned layer from ``connectors`` applied first; it runs once per step for a given record, however
many arguments read it) and ``connector_idx`` (which element of a connector's tuple output, e.g. BYOT's
``(feature, logits)``). Mistakes are caught when the distiller is
built (unknown loss, recorder or connector; argument names that are not the loss's forward arguments) or at the
first step (shapes that cannot be compared without a connector).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_component, register_component
from slimkit.errors import ConfigError, closest
from slimkit.training.distill.connectors import OFDTeacherConnector, bn_margin, connector_for
from slimkit.training.distill.losses import OFDLoss
from slimkit.training.distill.recorders import RecorderManager
from slimkit.utils import model_device

log = logging.getLogger(__name__)
_ARG_FIELDS = {"from_student", "recorder", "record_idx", "data_idx", "connector", "connector_idx"}


def _modules(kind: str, specs: Mapping[str, Any] | None) -> nn.ModuleDict:
    built = nn.ModuleDict()
    for name, spec in (specs or {}).items():
        obj = build_component(spec)
        if not isinstance(obj, nn.Module):
            raise ConfigError(f"{kind} {name!r} must build an nn.Module, got {type(obj).__name__}.")
        built[name] = obj
    return built


def _element(value: Any, index: Any, what: str) -> Any:
    """``value[index]`` of a tuple output (``connector_idx``), or a ConfigError naming ``what``."""
    if not isinstance(value, (tuple, list)) or isinstance(index, bool) or not isinstance(index, int) or not (
            -len(value) <= index < len(value)):
        size = f"a tuple of {len(value)}" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}"
        raise ConfigError(f"connector_idx={index!r}: the output of {what} is {size}; connector_idx picks an element "
                          "of a connector's tuple output.")
    return value[index]


def _squeeze_pooled(kwargs: dict[str, Any]) -> None:
    """A pooled ``[N, C, 1, 1]`` map met with an ``[N, C]`` feature is read as ``[N, C]`` (MMCls's neck.gap)."""
    pair = [(k, v) for k, v in list(kwargs.items())[:2] if isinstance(v, torch.Tensor)]
    if len(pair) != 2 or pair[0][1].shape == pair[1][1].shape:
        return
    (ka, a), (kb, b) = pair
    for key, big, small in ((ka, a, b), (kb, b, a)):
        if big.dim() > small.dim() and big.shape[: small.dim()] == small.shape and all(
                d == 1 for d in big.shape[small.dim():]):
            kwargs[key] = big.reshape(small.shape)


def forward_arguments(loss: nn.Module) -> list[str]:
    """The argument names of ``loss.forward`` (what a loss mapping must fill)."""
    params = inspect.signature(loss.forward).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty]


class ConfigurableDistiller(nn.Module):
    """Computes named distillation losses from what the student and teacher recorders captured.

    ``student_recorders`` / ``teacher_recorders``: name -> ``dict(type="ModuleOutputs", source="fc")`` (see
    :mod:`slimkit.training.distill.recorders`); ``distill_losses``: name -> a loss or ``dict(type="KLDivergence",
    tau=4)``; ``connectors``: name -> a connector or its dict; ``loss_forward_mappings``: see the module doc.
    Call :meth:`prepare` with the student and the teacher once, then record inside :meth:`student_recording`
    and :meth:`teacher_recording` and read :meth:`compute_distill_losses`. A loss that returns a tensor rather
    than a scalar (``reduction="none"``) is averaged, as MMEngine does. ``distill_deliveries`` (MMRazor's
    deliveries) is not supported.
    """

    def __init__(self, student_recorders: Mapping[str, Any] | None = None,
                 teacher_recorders: Mapping[str, Any] | None = None,
                 distill_losses: Mapping[str, Any] | None = None,
                 loss_forward_mappings: Mapping[str, Any] | None = None,
                 connectors: Mapping[str, Any] | None = None,
                 distill_deliveries: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if distill_deliveries:
            raise ConfigError("ConfigurableDistiller: distill_deliveries (MMRazor's deliveries) is not supported; "
                              "record the values the deliveries would carry instead.")
        self.student_recorders = RecorderManager(student_recorders)
        self.teacher_recorders = RecorderManager(teacher_recorders)
        self.distill_losses = _modules("distill loss", distill_losses)
        self.connectors = _modules("connector", connectors)
        self.loss_forward_mappings = self._check_mappings(dict(loss_forward_mappings or {}))

    def _check_mappings(self, mappings: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
        for name in mappings:
            if name not in self.distill_losses:
                raise ConfigError(f"loss_forward_mappings names loss {name!r}, which distill_losses does not define."
                                  f"{closest(name, self.distill_losses)} Losses: {', '.join(self.distill_losses)}.")
        if not mappings and self.distill_losses:
            raise ConfigError(f"loss_forward_mappings is empty: map the forward arguments of each of "
                              f"{', '.join(self.distill_losses)} to recorders.")
        for name, loss in self.distill_losses.items():
            expected = forward_arguments(loss)
            sets = [sorted(a) for a in getattr(loss, "argument_sets", [expected])]
            given = mappings.get(name)
            if given is None:
                log.warning("distill loss %r has no loss_forward_mappings entry and is not computed (MMRazor's rule: "
                            "only mapped losses run).", name)
                continue
            if not isinstance(given, Mapping) or sorted(given) not in sets:
                expected = sets[0] if len(sets) == 1 else " or ".join(map(str, sets))
                got = sorted(given) if isinstance(given, Mapping) else "no mapping"
                raise ConfigError(f"loss_forward_mappings[{name!r}] must fill the forward arguments of "
                                  f"{type(loss).__name__}: expected keys {expected}, got {got}.")
            for arg, spec in given.items():
                where = f"loss_forward_mappings[{name!r}][{arg!r}]"
                if not isinstance(spec, Mapping) or "recorder" not in spec or "from_student" not in spec:
                    raise ConfigError(f"{where} must be dict(from_student=True|False, recorder=<name>), got {spec!r}.")
                extra = sorted(set(spec) - _ARG_FIELDS)
                if extra:
                    raise ConfigError(f"{where} has unknown field(s) {extra}; fields: {sorted(_ARG_FIELDS)}.")
                manager = self.student_recorders if spec["from_student"] else self.teacher_recorders
                side = "student" if spec["from_student"] else "teacher"
                if spec["recorder"] not in manager.recorders:
                    raise ConfigError(f"{where} reads {side} recorder {spec['recorder']!r}, which does not exist."
                                      f"{closest(str(spec['recorder']), manager.recorders)} {side} recorders: "
                                      f"{', '.join(manager.recorders) or 'none'}.")
                connector = spec.get("connector")
                if connector is not None and connector not in self.connectors:
                    raise ConfigError(f"{where} names connector {connector!r}, which connectors does not define."
                                      f"{closest(str(connector), self.connectors)}")
        return {k: {a: dict(s) for a, s in v.items()} for k, v in mappings.items()}

    def prepare(self, student: nn.Module, teacher: nn.Module) -> None:
        """Bind the recorders to ``student`` and ``teacher`` (unknown module names list the real ones).

        The distiller's own connectors and loss buffers move to the student's device (they meet its features).
        """
        self.student_recorders.initialize(student)
        self.teacher_recorders.initialize(teacher)
        self.to(model_device(student))

    def student_recording(self) -> RecorderManager:
        """Context manager: record the student while the block runs (hooks removed on exit)."""
        return self.student_recorders

    def teacher_recording(self) -> RecorderManager:
        """Context manager: record the teacher while the block runs (hooks removed on exit)."""
        return self.teacher_recorders

    def _read(self, spec: Mapping[str, Any]) -> tuple[torch.Tensor, str]:
        manager = self.student_recorders if spec["from_student"] else self.teacher_recorders
        value = manager.get(spec["recorder"], int(spec.get("record_idx", 0)), spec.get("data_idx"))
        side = "student" if spec["from_student"] else "teacher"
        source = manager.recorders[spec["recorder"]].source or "<the whole model>"
        return value, f"{side} layer {source!r} (recorder {spec['recorder']!r})"

    def compute_distill_losses(self) -> dict[str, torch.Tensor]:
        """Every distill loss on the latest records: loss name -> scalar tensor."""
        losses: dict[str, torch.Tensor] = {}
        connected: dict[tuple[Any, ...], Any] = {}  # one connector run per record per step
        for name, loss in self.distill_losses.items():
            if name not in self.loss_forward_mappings:
                continue
            kwargs, labels = {}, {}
            for arg, spec in self.loss_forward_mappings[name].items():
                value, labels[arg] = self._read(spec)
                if spec.get("connector") is not None:
                    key = (spec["connector"], spec["from_student"], spec["recorder"], spec.get("record_idx", 0),
                           spec.get("data_idx"))
                    if key not in connected:
                        connected[key] = self.connectors[spec["connector"]](value)
                    value = connected[key]
                if spec.get("connector_idx") is not None:
                    value = _element(value, spec["connector_idx"], f"connector {spec.get('connector')!r}")
                kwargs[arg] = value
            if getattr(loss, "same_shape", True):
                _squeeze_pooled(kwargs)
                self._check_shapes(name, loss, kwargs, labels)
            value = loss(**kwargs)
            losses[name] = value.mean() if isinstance(value, torch.Tensor) and value.dim() > 0 else value
        return losses

    def _check_shapes(self, name: str, loss: nn.Module, kwargs: dict[str, Any], labels: dict[str, str]) -> None:
        pair = list(kwargs.items())[:2]  # the student / teacher pair (further arguments: labels, data samples)
        shapes = {arg: tuple(v.shape) for arg, v in pair if isinstance(v, torch.Tensor)}
        if len(set(shapes.values())) <= 1:
            return
        (a, sa), (b, sb) = list(shapes.items())[:2]
        try:
            hint = connector_for(sa, sb)
            fix = (f" Add a connector: connectors=dict({name}_connector=dict(type={type(hint).__name__!r}, ...)) "
                   f"and connector='{name}_connector' on the student side of the mapping.")
        except ConfigError:
            fix = " No connector can fix this (they change widths only); record other layers."
        raise ConfigError(f"Loss {name!r} ({type(loss).__name__}) compares {labels[a]} of shape {sa} with "
                          f"{labels[b]} of shape {sb}; they must have the same shape.{fix}")


class OFDDistiller(ConfigurableDistiller):
    """The distiller of OFD (Heo et al. 2019): sets each ``OFDTeacherConnector``'s margin from the teacher.

    :meth:`init_ofd_connectors` (called by :class:`~slimkit.razor.OverhaulFeatureDistillation`) finds, for every
    :class:`~slimkit.training.distill.losses.OFDLoss`, the teacher-side connector and the batch norm its
    recorder reads, and gives the connector that norm's margin.
    """

    def init_ofd_connectors(self, teacher: nn.Module) -> None:
        """Set the margins of the teacher connectors of every OFD loss."""
        for name, mapping in self.loss_forward_mappings.items():
            if not isinstance(self.distill_losses[name], OFDLoss):
                continue
            for arg, spec in mapping.items():
                if spec["from_student"] or spec.get("connector") is None:
                    continue
                connector = self.connectors[spec["connector"]]
                if not isinstance(connector, OFDTeacherConnector):
                    raise ConfigError(f"OFD loss {name!r}: the teacher side ({arg!r}) goes through "
                                      f"{type(connector).__name__}; it must be an OFDTeacherConnector.")
                source = self.teacher_recorders.recorders[spec["recorder"]].source
                connector.init_margin(bn_margin(teacher.get_submodule(source)))


class BYOTDistiller(ConfigurableDistiller):
    """MMRazor's distiller for self-distillation (BYOT): the student is its own teacher.

    The same recorders and mappings as :class:`ConfigurableDistiller` (``connector_idx`` picks an element of a
    :class:`~slimkit.training.distill.connectors.BYOTConnector`'s ``(feature, logits)``); the "teacher" recorders
    watch the student's deepest layers, and their records are detached (they are targets, not paths to train).
    """

    def _read(self, spec: Mapping[str, Any]) -> tuple[torch.Tensor, str]:
        value, label = super()._read(spec)
        if not spec["from_student"] and isinstance(value, torch.Tensor):
            value = value.detach()
        return value, label


register_component(ConfigurableDistiller, "distiller")
register_component(BYOTDistiller, "distiller")
register_component(OFDDistiller, "distiller")
