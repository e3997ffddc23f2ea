"""MMArchitectureQuant: MMRazor's quantization algorithm on slimkit's CPU int8 engine (fbgemm, torch.ao FX).

``model=dict(type='MMArchitectureQuant', architecture=..., quantizer=dict(type='NativeQuantizer' |
'AcademicQuantizer', global_qconfig=dict(w_observer=..., a_observer=..., w_fake_quant=..., a_fake_quant=...,
w_qscheme=dict(qdtype='qint8', bit=8, ...), a_qscheme=dict(qdtype='quint8', bit=8, ...))))``:

* **PTQ** (observers with ``FakeQuantize``, MMRazor's ``ptq`` configs): :meth:`MMArchitectureQuant.calibrate`
  runs the batches through observers and converts the architecture to a static int8 FX graph
  (:func:`~slimkit.engines.quantization.int8.quantize_static`: per-channel int8 weights, uint8 activations, fbgemm
  kernels) -- really int8 on the CPU. Observers named ``*Histogram*`` calibrate with histograms, others min/max.
* **LSQ QAT** (``LearnableFakeQuantize``, MMRazor's ``lsq`` configs): the architecture's convs and linears get
  learned-step fake quantization of weights and inputs (the engine of the registry's ``lsq`` algorithm),
  trained by :func:`slimkit.training.fit` in ``mode="loss"``; :meth:`~MMArchitectureQuant.calibrate` then takes
  the weights trained on the 8-bit grid and converts them to the same static int8 graph.

TensorRT and OpenVINO backends (``TensorRTQuantizer``, ``OpenVINOQuantizer``) are GPU / Intel-runtime
deployment paths slimkit does not build: they are refused, naming the CPU path. Bit widths other than 8 are
refused too (the int8 engine's kernels).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core import registry
from slimkit.data.batches import split_batch
from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.int8 import quantize_static
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.base import BaseAlgorithm
from slimkit.faces.mmrazor.builder import register_module

BACKENDS: dict[str, str] = {"NativeQuantizer": "native", "AcademicQuantizer": "academic"}
REFUSED: tuple[str, ...] = ("TensorRTQuantizer", "OpenVINOQuantizer")
_QCONFIG_KEYS = {"w_observer", "a_observer", "w_fake_quant", "a_fake_quant", "w_qscheme", "a_qscheme"}


def _kind(spec: Any) -> str:
    return str((spec or {}).get("type", "")).rpartition(".")[2] if isinstance(spec, Mapping) else ""


def parse_quantizer(quantizer: Mapping[str, Any]) -> dict[str, Any]:
    """``{"backend", "mode" ("ptq" | "lsq"), "observer" ("histogram" | "minmax")}`` from MMRazor's quantizer dict."""
    if not isinstance(quantizer, Mapping):
        raise ConfigError(f"MMArchitectureQuant needs quantizer=dict(type='NativeQuantizer', global_qconfig=...), got "
                          f"{type(quantizer).__name__}.")
    kind = _kind(quantizer)
    if kind in REFUSED:
        raise ConfigError(f"quantizer type {kind!r} targets a {kind[:-9]} deployment, which slimkit does not build. "
                          "The CPU path: quantizer=dict(type='NativeQuantizer' or 'AcademicQuantizer', "
                          "global_qconfig=...) converts to int8 with fbgemm kernels (fast on x86 CPUs).")
    if kind not in BACKENDS:
        raise ConfigError(f"quantizer type {kind!r} is not supported; use one of {', '.join(BACKENDS)} (slimkit's CPU "
                          f"int8 engine). {', '.join(REFUSED)} are refused (no GPU/OpenVINO deployment here).")
    qconfig = dict(quantizer.get("global_qconfig") or {})
    unknown = set(qconfig) - _QCONFIG_KEYS
    if unknown:
        raise ConfigError(f"global_qconfig has unknown key(s) {sorted(unknown)}; keys: {sorted(_QCONFIG_KEYS)}.")
    for side in ("w", "a"):
        bits = dict(qconfig.get(f"{side}_qscheme") or {}).get("bit", 8)
        if bits != 8:
            raise ConfigError(f"global_qconfig.{side}_qscheme bit={bits!r}: slimkit's int8 engine quantizes to 8 bits; "
                              "for lower weight bits use a lowbit smash algorithm (e.g. 'hqq', 'gptq').")
    fakes = {_kind(qconfig.get("w_fake_quant")), _kind(qconfig.get("a_fake_quant"))} - {""}
    lsq = "LearnableFakeQuantize" in fakes
    if lsq and fakes != {"LearnableFakeQuantize"}:
        raise ConfigError(f"global_qconfig mixes fake quantizers {sorted(fakes)}; LSQ QAT needs LearnableFakeQuantize "
                          "for both w_fake_quant and a_fake_quant.")
    observer = "histogram" if "Histogram" in _kind(qconfig.get("a_observer")) else "minmax"
    return {"backend": BACKENDS[kind], "mode": "lsq" if lsq else "ptq", "observer": observer}


@register_module()
class MMArchitectureQuant(BaseAlgorithm):
    """Quantize ``architecture`` to int8 for the CPU: PTQ or LSQ QAT, from MMRazor's quantizer config.

    ``float_checkpoint``: a ``.safetensors`` file loaded into the architecture first (URLs and ``.pth`` are not
    read). ``quantizer``: see the module doc; ``tracer`` and other quantizer keys MMRazor uses for its own FX
    tracing are read and ignored (slimkit traces with torch.ao's FX), as is ``deploy_cfg`` (MMDeploy's backend
    config: the backend itself is the quantizer's type, refused unless it is a CPU one). After :meth:`calibrate`,
    ``architecture`` is the int8 graph (``quantized`` is True) and ``mode="tensor"/"predict"`` run it.
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any], quantizer: Mapping[str, Any],
                 data_preprocessor: Any = None, forward_modes: Iterable[str] = ("tensor", "predict", "loss"),
                 float_checkpoint: str | None = None, input_shapes: Any = None,
                 init_cfg: Mapping[str, Any] | None = None, deploy_cfg: Any = None) -> None:
        settings = parse_quantizer(quantizer)
        ckpt = dict(type="Pretrained", checkpoint=float_checkpoint) if float_checkpoint else None
        super().__init__(architecture, data_preprocessor, init_cfg or ckpt)
        self.backend, self.qat_mode, self.observer = settings["backend"], settings["mode"], settings["observer"]
        self.init_weights()
        self.quantized = False
        self.engine: Quantizer | None = None
        if self.qat_mode == "lsq":
            config = [{"quant_types": ["weight", "input"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]
            self.engine = registry.get("lsq").engine(self.architecture, config)  # the registry's LSQ engine
            self.engine.compress()

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """The task loss through the fake-quantized layers (LSQ QAT) or the float ones (PTQ, before calibrate)."""
        if self.quantized:
            raise ConfigError("This MMArchitectureQuant is already converted to int8 (an inference graph): train "
                              "before calibrate(), not after.")
        return super().loss(inputs, data_samples)

    def calibrate(self, batches: Iterable[Any], exclude: tuple[str, ...] = ()) -> nn.Module:
        """Convert the architecture to static int8 calibrated on ``batches``; returns the int8 model.

        With LSQ QAT, the weights trained on the 8-bit grid are what is converted. ``exclude``: module names or
        patterns kept in float.
        """
        if self.quantized:
            raise ConfigError("calibrate() already ran: the architecture is int8.")
        inputs = [split_batch(b)[0] for b in batches]
        if not inputs:
            raise ConfigError("calibrate() needs at least one batch of inputs.")
        if self.data_preprocessor is not None:
            inputs = [self.data_preprocessor(x) for x in inputs]
        model = self.architecture
        if self.engine is not None:
            trained = self.engine.quantized_state_dict()
            model = self.engine.unwrap_model()
            model.load_state_dict(trained, strict=False)
            self.engine = None
        converted, self.record = quantize_static(model.cpu().eval(), inputs, observer=self.observer,
                                                 max_fp32_layers=0, exclude=tuple(exclude))
        self.architecture = converted
        self.quantized = True
        return converted
