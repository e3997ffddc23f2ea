"""compressed-tensors ``pack-quantized`` checkpoints (what llm-compressor writes and vLLM / transformers read).

One quantized Linear ``<name>`` is stored as (the compressed-tensors library's own packers are used):

- ``<name>.weight_packed``: int32 ``[out, ceil(in * bits / 32)]``, codes ``q - 2**(bits-1)`` (signed) packed
  densely along the row (``pack_to_int32``; 8 four-bit or 4 eight-bit values per word, value ``i`` in bits
  ``i*bits..``);
- ``<name>.weight_scale``: ``[out, n_groups]`` (``[out, 1]`` per-channel), in the model's dtype (float32 for
  bfloat16 models: slimkit's float16 scales are exact in float32 and float16, not in bfloat16);
- ``<name>.weight_zero_point`` (asymmetric only): the signed zero points ``z - 2**(bits-1)`` packed along the
  OUTPUT dim (``pack_to_int32(..., packed_dim=0)``): int32 ``[ceil(out * bits / 32), n_groups]``;
- ``<name>.weight_shape``: int64 ``[out, in]``; ``<name>.bias`` as a float tensor when the layer has one.

The dequantized weight is ``(q_signed - zp_signed) * scale``, which is slimkit's ``(q - z) * s`` exactly. The
``quantization_config`` holds one config group per distinct scheme (``targets: ["Linear"]`` when there is one
scheme, else the exact layer names) and lists every float Linear in ``ignore``.

Reading accepts what slimkit can run on its packed layers: ``format`` ``pack-quantized`` (or ``naive-quantized``
int8 weights), integer weights at 4 or 8 bits, strategy ``group`` or ``channel``, no activation quantization, no
activation-order ``g_idx`` (``actorder: group``), no transforms and no KV-cache scheme. Anything else is refused
naming the field.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.lowbit.linear import SCALE_DTYPE, PackedLinear
from slimkit.errors import MissingPackageError
from slimkit.formats.hf_format import HFCheckpointFormat, quantizer_options
from slimkit.formats.kinds import FormatError
from slimkit.formats.scheme import COMPRESSED_TENSORS, FORMAT_BITS, WeightScheme, plain_linears, signed_codes

QUANT_METHOD = "compressed-tensors"
PACKED = "pack-quantized"
#: int8 weights stored unpacked (``weight`` int8 + ``weight_scale``), a layout llm-compressor writes for W8A8-int
NAIVE = "naive-quantized"
READ_FORMATS = (PACKED, NAIVE)


@functools.cache
def ct_library() -> SimpleNamespace:
    """What slimkit uses of the ``compressed_tensors`` package, or a MissingPackageError saying how to install it."""
    try:
        import compressed_tensors
        from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
        from compressed_tensors.quantization import QuantizationConfig
        from compressed_tensors.utils.match import is_match
    except ImportError as exc:
        raise MissingPackageError(f"compressed-tensors checkpoints need the compressed-tensors package ({exc}). "
                                  "Install it: pip install 'slimkit[interop]'") from exc
    return SimpleNamespace(version=compressed_tensors.__version__, pack_to_int32=pack_to_int32,
                           unpack_from_int32=unpack_from_int32, QuantizationConfig=QuantizationConfig,
                           is_match=is_match)


# ---------------------------------------------------------------------------------------------- one layer
def scale_dtype_for(model_dtype: torch.dtype) -> torch.dtype:
    """The dtype ``weight_scale`` is written in: the model's when it holds float16 values exactly, else float32.

    Readers dequantize in the scale's dtype (transformers' ``dequantize=True`` path does), so float32/float16
    models get exact weights; a bfloat16 model still gets float32 scales (bfloat16 would round them).
    """
    return model_dtype if model_dtype in (torch.float32, torch.float16) else torch.float32


def layer_tensors(layer: PackedLinear, scheme: WeightScheme,
                  scale_dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The compressed-tensors tensors of one packed layer, keyed by local name (``weight_packed``...)."""
    pack_to_int32 = ct_library().pack_to_int32
    out: dict[str, torch.Tensor] = {
        "weight_packed": pack_to_int32(signed_codes(layer), scheme.bits),
        "weight_scale": layer.scales.detach().to(scale_dtype).clone(),
        "weight_shape": torch.tensor([layer.out_features, layer.in_features], dtype=torch.int64),
    }
    if not scheme.sym:
        zp = (layer.zeros.float().round() - (1 << (scheme.bits - 1))).to(torch.int8)
        out["weight_zero_point"] = pack_to_int32(zp, scheme.bits, packed_dim=0).contiguous()
    if layer.bias is not None:
        out["bias"] = layer.bias.detach().clone()
    return out


def _scales_fp16(scale: torch.Tensor, name: str, warnings: list[str]) -> torch.Tensor:
    """Scales as float16 (slimkit's kernels' type); notes in ``warnings`` when that rounds them."""
    half = scale.to(SCALE_DTYPE)
    if not torch.equal(half.to(scale.dtype), scale):
        rel = float(((half.float() - scale.float()).abs() / scale.float().abs().clamp(min=1e-30)).max())
        warnings.append(f"{name}: {scale.dtype} scales rounded to float16 (max relative change {rel:.2e})")
    return half


def layer_from_tensors(tensors: dict[str, torch.Tensor], scheme: WeightScheme, name: str,
                       dtype: torch.dtype = torch.float32, warnings: list[str] | None = None) -> PackedLinear:
    """Build a PackedLinear from one layer's compressed-tensors tensors (local names), without re-quantizing."""
    unpack_from_int32 = ct_library().unpack_from_int32
    warnings = [] if warnings is None else warnings
    mid = 1 << (scheme.bits - 1)
    scale = tensors.get("weight_scale")
    if scale is None:
        raise FormatError(f"{name}: the checkpoint has no {name}.weight_scale; a quantized layer needs one.")
    if "weight_packed" in tensors:
        shape = tensors.get("weight_shape")
        if shape is None:
            raise FormatError(f"{name}: {name}.weight_packed comes without {name}.weight_shape.")
        out_f, in_f = (int(v) for v in shape.tolist())
        q = unpack_from_int32(tensors["weight_packed"].to(torch.int32), scheme.bits, torch.Size([out_f, in_f]))
    elif "weight" in tensors and tensors["weight"].dtype == torch.int8:
        q = tensors["weight"]
        out_f, in_f = q.shape
    else:
        raise FormatError(f"{name}: expected {name}.weight_packed (pack-quantized) or an int8 {name}.weight "
                          f"(naive-quantized); found {sorted(tensors)}.")
    groups = 1 if scheme.group_size is None else -(-in_f // scheme.group_size)
    if tuple(scale.shape) != (out_f, groups):
        raise FormatError(f"{name}.weight_scale has shape {tuple(scale.shape)}; a [{out_f}, {in_f}] weight with "
                          f"{scheme.describe()} needs ({out_f}, {groups}).")
    if scheme.sym:
        zeros = torch.full((out_f, groups), float(mid))
    else:
        zp = tensors.get("weight_zero_point")
        if zp is None:
            raise FormatError(f"{name}: the scheme is asymmetric but {name}.weight_zero_point is missing.")
        if zp.dtype == torch.int32:
            zp = unpack_from_int32(zp, scheme.bits, torch.Size([out_f, groups]), packed_dim=0)
        zeros = zp.float().reshape(out_f, groups) + mid
    codes = (q.to(torch.int16) + mid).to(torch.uint8)
    group_size = in_f if scheme.group_size is None else scheme.group_size
    bias = tensors.get("bias")
    return PackedLinear.from_quantized(codes, _scales_fp16(scale, name, warnings), zeros.to(SCALE_DTYPE),
                                       scheme.bits, group_size, bias=None if bias is None else bias.to(dtype),
                                       dtype=dtype)


# ---------------------------------------------------------------------------------------------- config
def _weights_args(scheme: WeightScheme, act_order: bool) -> dict[str, Any]:
    args: dict[str, Any] = {"num_bits": scheme.bits, "type": "int", "symmetric": scheme.sym,
                            "strategy": "channel" if scheme.group_size is None else "group",
                            "group_size": scheme.group_size, "dynamic": False}
    if act_order:
        args["actorder"] = "weight"  # columns were reordered during calibration only: no g_idx is stored
    return args


def build_config(schemes: dict[str, WeightScheme], ignore: list[str], act_order: bool = False) -> dict[str, Any]:
    """The ``quantization_config`` for layers ``schemes`` (validated by compressed-tensors' own schema)."""
    lib = ct_library()
    distinct = sorted(set(schemes.values()), key=lambda s: (s.bits, s.group_size or 0, s.sym))
    groups = {}
    for i, scheme in enumerate(distinct):
        targets = ["Linear"] if len(distinct) == 1 else [n for n, s in schemes.items() if s == scheme]
        groups[f"group_{i}"] = {"targets": targets, "weights": _weights_args(scheme, act_order),
                                "input_activations": None, "output_activations": None, "format": PACKED}
    config = lib.QuantizationConfig.model_validate({"config_groups": groups, "format": PACKED, "ignore": sorted(ignore),
                                                "quantization_status": "compressed"})
    return {"quant_method": QUANT_METHOD, "version": lib.version, "sparsity_config": {},
            "transform_config": {}, **config.model_dump(exclude={"quant_method"})}


def _fail(field: str, got: Any, allowed: str) -> FormatError:
    shown = repr(got)
    shown = shown if len(shown) <= 100 else shown[:97] + "..."
    return FormatError(f"quantization_config.{field} = {shown}: slimkit imports {allowed}. This checkpoint needs "
                       "another runtime (vLLM, transformers); slimkit runs compressed-tensors weight-only int4/int8.")


def _scheme_of(key: str, group: Any) -> WeightScheme:
    """The WeightScheme of config group ``key`` (a QuantizationScheme), or a FormatError naming the field."""
    field = f"config_groups.{key}"
    for act in ("input_activations", "output_activations"):
        if getattr(group, act, None) is not None:
            raise _fail(f"{field}.{act}", getattr(group, act).model_dump(exclude_defaults=True),
                        "weight-only schemes (activation quantization is not supported: null)")
    w = group.weights
    if w is None:
        raise _fail(f"{field}.weights", None, "schemes that quantize weights")
    if str(w.type) != "int":
        raise _fail(f"{field}.weights.type", str(w.type), "'int' weights")
    if w.num_bits not in FORMAT_BITS:
        raise _fail(f"{field}.weights.num_bits", w.num_bits, f"{' or '.join(map(str, FORMAT_BITS))} bits")
    strategy = str(w.strategy)
    if strategy not in ("group", "channel"):
        raise _fail(f"{field}.weights.strategy", strategy, "'group' or 'channel'")
    if str(w.actorder) in ("group", "dynamic"):
        raise _fail(f"{field}.weights.actorder", str(w.actorder),
                    "'weight' / 'static' or null (group activation order stores a g_idx permutation)")
    if w.dynamic not in (False, None):
        raise _fail(f"{field}.weights.dynamic", w.dynamic, "static weights (dynamic: false)")
    group_size = None if strategy == "channel" else w.group_size
    if group_size is not None and (not isinstance(group_size, int) or group_size < 1):
        raise _fail(f"{field}.weights.group_size", group_size, "a positive group size")
    return WeightScheme(int(w.num_bits), group_size, bool(w.symmetric))


def parse_config(qc: Any) -> tuple[list[tuple[list[str], WeightScheme]], list[str]]:
    """``([(targets, scheme) per config group], ignore)`` from a compressed-tensors ``quantization_config``.

    Refuses (naming the field) what slimkit's packed layers cannot run: see the module doc.
    """
    from pydantic import ValidationError  # compressed-tensors' own dependency: present when its guard passed

    lib = ct_library()

    if not isinstance(qc, dict):
        raise _fail("(top level)", type(qc).__name__, "a JSON object")
    fmt = qc.get("format")
    if fmt not in READ_FORMATS:
        raise _fail("format", fmt, f"{' or '.join(repr(f) for f in READ_FORMATS)}")
    for key in ("kv_cache_scheme", "transform_config", "sparsity_config"):
        if qc.get(key):
            raise _fail(key, qc[key], f"checkpoints without {key} (null or empty)")
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise _fail("config_groups", groups, "a non-empty object of quantization schemes")
    try:
        config = lib.QuantizationConfig.model_validate({k: v for k, v in qc.items()
                                                    if k not in ("version", "sparsity_config", "transform_config")})
    except (ValidationError, KeyError, ValueError, TypeError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first.get("loc", ()) if "[" not in str(p))  # drop pydantic's validator names
        raise FormatError(f"quantization_config{('.' + where) if where else ''} is not a valid compressed-tensors "
                          f"config: {first.get('msg')}. Supported: weight-only int4/int8 pack-quantized schemes "
                          "with strategy 'group' or 'channel'.") from exc
    parsed = [(list(g.targets), _scheme_of(k, g)) for k, g in config.config_groups.items()]
    return parsed, list(config.ignore or [])


def match_layers(model: nn.Module, groups: list[tuple[list[str], WeightScheme]],
                 ignore: list[str]) -> dict[str, WeightScheme]:
    """``{Linear name: scheme}`` by compressed-tensors' own target matching (class names, exact names, ``re:``)."""
    is_match = ct_library().is_match
    found: dict[str, WeightScheme] = {}
    for name, module in model.named_modules():
        if not name or not isinstance(module, nn.Linear) or is_match(name, module, ignore):
            continue
        for targets, scheme in groups:
            if is_match(name, module, targets):
                found[name] = scheme
                break
    return found


def is_ct_layer(tensor_names: set[str], name: str) -> bool:
    """Whether layer ``name`` is stored quantized among the checkpoint's ``tensor_names``."""
    return f"{name}.weight_scale" in tensor_names and (f"{name}.weight_packed" in tensor_names
                                                       or f"{name}.weight" in tensor_names)


class CompressedTensorsFormat(HFCheckpointFormat):
    """compressed-tensors ``pack-quantized`` (the layout llm-compressor writes; transformers and vLLM read it)."""

    name = COMPRESSED_TENSORS
    title = COMPRESSED_TENSORS
    quant_method = QUANT_METHOD

    def layer_tensors(self, layer: PackedLinear, scheme: WeightScheme,  # noqa: D102
                      dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return layer_tensors(layer, scheme, scale_dtype_for(dtype))

    def quantization_config(self, schemes: dict[str, WeightScheme], group_sizes: dict[str, int],  # noqa: D102
                            ignore: list[str], smash_config: Any = None) -> dict[str, Any]:
        return build_config(schemes, ignore, quantizer_options(smash_config)[0])

    def quantized_layers(self, model: nn.Module, qc: dict[str, Any],  # noqa: D102
                         names: set[str]) -> dict[str, Any]:
        groups, ignore = parse_config(qc)
        matched = match_layers(model, groups, ignore)
        stored = {n for n in plain_linears(model) if is_ct_layer(names, n)}
        if matched.keys() != stored:
            odd = sorted(set(matched) ^ stored)
            raise FormatError(f"quantization_config targets and the stored tensors disagree on {', '.join(odd[:5])}: "
                              "the config (config_groups / ignore) does not describe these weights.")
        return matched

    def layer_from_tensors(self, tensors: dict[str, torch.Tensor], how: Any, name: str,  # noqa: D102
                           dtype: torch.dtype, notes: list[str]) -> PackedLinear:
        return layer_from_tensors(tensors, how, name, dtype, notes)

    def runtimes(self) -> list[str]:  # noqa: D102
        return [
            "- **transformers** (`pip install compressed-tensors`): `AutoModelForCausalLM.from_pretrained(\"DIR\", "
            "quantization_config=CompressedTensorsConfig(dequantize=True))`; symmetric schemes also load with a plain "
            "`from_pretrained(\"DIR\")` (checked with transformers 5.24 + compressed-tensors 0.20).",
            "- **vLLM**: `vllm serve DIR` (compressed-tensors `pack-quantized` weight-only int4/int8, the layout "
            "llm-compressor writes; not run in slimkit's own tests).",
        ]


__all__ = ["COMPRESSED_TENSORS", "PACKED", "QUANT_METHOD", "CompressedTensorsFormat", "build_config", "ct_library",
           "is_ct_layer", "layer_from_tensors", "layer_tensors", "match_layers", "parse_config"]
