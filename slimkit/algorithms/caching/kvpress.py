"""kvpress: NVIDIA's KV-cache presses applied at generation time (the prompt's cache shrunk after pre-filling)."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, Constant, UniformFloatHyperparameter

from slimkit.core.contract import SaveFn, SlimkitCacher, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines._patch import patch_forward
from slimkit.errors import ConfigError
from slimkit.zoo.sources import has_tokenizer

#: Pruna's ``press_type`` choices (kvpress's class names): its scorer and standalone presses
PRESS_TYPES = ("CompactorPress", "CURPress", "ExpectedAttentionPress", "ExpectedAttentionStatsPress", "FastKVzipPress",
               "FinchPress", "KnormPress", "KVzapPress", "KVzipPress", "KeyDiffPress", "LagKVPress",
               "LeverageScorePress", "NonCausalAttnPress", "ObservedAttentionPress", "PyramidKVPress",
               "QFilterPress", "RandomPress", "SnapKVPress", "StreamingLLMPress", "TOVAPress")
#: presses that load trained weights from the Hugging Face hub, or rewrite the tokenizer and embeddings
NEEDS_HUB = ("ExpectedAttentionStatsPress", "FastKVzipPress", "KVzapPress", "QFilterPress")
OFFLINE_HINT = "KnormPress, ExpectedAttentionPress, StreamingLLMPress, TOVAPress or SnapKVPress"


class PressKwargsHyperparameter(Constant):
    """None, or a dict of the chosen press's own constructor arguments (checked against the press when applied)."""

    def __init__(self, name: str = "press_kwargs", meta: Mapping[Hashable, Any] | None = None) -> None:
        super().__init__(name, None, meta=meta)

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept None or a dict with string keys."""
        return value is None or (isinstance(value, Mapping) and all(isinstance(k, str) for k in value))

    def describe(self) -> str:
        """What the hyperparameter accepts, for error messages and the docs."""
        return "None, or a dict of the press's constructor arguments, e.g. {'window_size': 16}"


def _cache_hook(press: Any, stats: dict[str, int]) -> Any:
    """The press's attention hook, fed as kvpress expects on any transformers; it counts the tokens kept.

    transformers >= 5.3 passes the cache as ``cache`` and no ``cache_position`` (kvpress 0.5.5 reads
    ``past_key_values`` and ``cache_position``): both are supplied from the cache the layer just filled.
    """
    inner = press.forward_hook

    def hook(module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        if cache is None:
            return output
        layer = cache.layers[module.layer_idx]
        seen, q_len = layer.keys.shape[-2], kwargs["hidden_states"].shape[1]
        position = kwargs.get("cache_position")
        if position is None:
            position = torch.arange(seen - q_len, seen, device=kwargs["hidden_states"].device)
        output = inner(module, args, {**kwargs, "past_key_values": cache, "cache_position": position}, output)
        if q_len > 1 and module.layer_idx == 0:  # a pre-fill: what the press left of the prompt's cache
            stats.update(prompt_tokens=int(seen), kept_tokens=int(layer.keys.shape[-2]), prefills=stats["prefills"] + 1)
        return output

    return hook


def _same_kind(value: Any, default: Any) -> bool:
    """Whether ``value`` has the kind of a press field whose default is ``default`` (free when there is none)."""
    if default is None or default is dataclasses.MISSING or isinstance(default, (list, tuple, dict)):
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def _raised_in_kvpress(exc: BaseException) -> bool:
    """Whether the innermost Python frame of ``exc``'s traceback is kvpress's code (the press refused the input)."""
    tb, last = exc.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and "kvpress" in Path(last.tb_frame.f_code.co_filename).parts


class PressedGenerate:
    """``model.generate`` run inside the press's context; ``stats()`` reports the last pre-fill's cache sizes."""

    def __init__(self, press: Any) -> None:
        self.press = press
        self.counts = {"prompt_tokens": 0, "kept_tokens": 0, "prefills": 0}
        press.forward_hook = _cache_hook(press, self.counts)

    def __call__(self, module: torch.nn.Module, inner: Any, args: tuple, kwargs: dict) -> Any:
        """Generate with the press compressing the prompt's KV cache after pre-filling."""
        try:
            with self.press(module):
                return inner(*args, **kwargs)
        except (AssertionError, RuntimeError, ValueError, IndexError, TypeError) as exc:
            if not _raised_in_kvpress(exc):
                raise
            # kvpress states its preconditions as asserts or fails on prompts too short for the press
            raise ConfigError(f"kvpress {type(self.press).__name__} refused this generation "
                              f"({type(exc).__name__}: {str(exc)[:200]}). Set cfg['kvpress_press_kwargs'] (e.g. a "
                              "smaller window_size) or use longer prompts.") from exc

    def stats(self) -> dict[str, int]:
        """Prompt tokens and KV entries kept per layer at the last pre-fill, and the pre-fills compressed so far."""
        return dict(self.counts)


@register
class Kvpress(SlimkitCacher):
    """Compress a causal LM's KV cache at generation time with one of kvpress's presses (Pruna's ``kvpress``).

    Inside every ``generate`` the press scores the prompt's keys and values after pre-filling and drops the
    ``compression_ratio`` share it ranks lowest (per layer and head, by the press's criterion: key norms, expected
    attention, a recent window, ...); new tokens then attend to the smaller cache. ``forward`` is unchanged.
    ``model.kv_press.stats()`` reports the prompt's tokens and the entries kept. Saved by re-applying the press.
    Presses that load trained weights from the Hugging Face hub (QFilterPress, KVzapPress, FastKVzipPress,
    ExpectedAttentionStatsPress) need it to be reachable. Needs ``pip install 'slimkit[kvpress]'``.
    """

    algorithm_name = "kvpress"
    references = {"GitHub": "https://github.com/NVIDIA/kvpress",
                  "Article": "https://huggingface.co/blog/nvidia/kvpress"}
    save_fn = SaveFn.REAPPLY
    extra = "kvpress"
    compatible_algorithms = {"compiler": ["torch_compile"], "batcher": []}

    def get_hyperparameters(self) -> list:
        """Pruna's press_type, compression_ratio and press_kwargs."""
        return [
            CategoricalHyperparameter("press_type", list(PRESS_TYPES), default_value="ExpectedAttentionPress", meta={
                "desc": "The kvpress press (its class name) that ranks the prompt's KV entries."}),
            UniformFloatHyperparameter("compression_ratio", 0.0, 1.0, default_value=0.5, meta={
                "desc": "Share of the prompt's KV entries removed after pre-filling (0: none); below 1."}),
            PressKwargsHyperparameter(meta={"desc": "Other constructor arguments of the press (None: its defaults), "
                                                    "e.g. {'window_size': 16} for SnapKVPress."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """A Hugging Face causal LM with ``model.model.layers[i].self_attn`` (where kvpress hooks its press)."""
        inner = getattr(model, "model", None)
        layers = getattr(getattr(inner, "language_model", inner), "layers", None)
        can_generate = getattr(model, "can_generate", None)
        return (isinstance(model, torch.nn.Module) and callable(can_generate) and bool(can_generate())
                and isinstance(layers, torch.nn.ModuleList) and len(layers) > 0
                and all(hasattr(layer, "self_attn") for layer in layers))

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("kvpress hooks the attention of Llama-style Hugging Face causal LMs (model.model.layers[i].self_attn: "
                "Llama, Mistral, Qwen2/3, Phi-3, Gemma 3...).")

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import kvpress (pip install 'slimkit[kvpress]')."""
        import kvpress

        return {"kvpress": kvpress}

    def _press(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        name, ratio = smash_config["press_type"], float(smash_config["compression_ratio"])
        kwargs = dict(smash_config["press_kwargs"] or {})
        if ratio >= 1.0:
            raise ConfigError("kvpress_compression_ratio=1.0 would remove the whole prompt cache; use a value below 1 "
                              "(0.5 removes half).")
        if name == "FinchPress":
            raise ConfigError("kvpress_press_type='FinchPress' adds a delimiter token to the tokenizer and the "
                              f"model's embeddings, which slimkit does not change; use {OFFLINE_HINT}.")
        if name == "KVzipPress" and not has_tokenizer(Path(str(getattr(model.config, "name_or_path", "")) or ".")):
            raise ConfigError("kvpress_press_type='KVzipPress' loads the model's tokenizer from its "
                              "config.name_or_path, which is not a local folder with a tokenizer here (a model built "
                              f"from a config, or a hub name); load the model from its folder, or use {OFFLINE_HINT}.")
        if name == "ObservedAttentionPress" and getattr(model.config, "_attn_implementation", None) != "eager":
            raise ConfigError("kvpress_press_type='ObservedAttentionPress' reads attention weights, which only eager "
                              "attention returns: load the model with attn_implementation='eager'.")
        cls = getattr(self.import_algorithm_packages()["kvpress"], name)
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(kwargs) - (fields - {"compression_ratio"}))
        if unknown:
            raise ConfigError(f"kvpress_press_kwargs has {unknown}, which {name} does not take; it takes "
                              f"{sorted(fields - {'compression_ratio'})} (compression_ratio is "
                              "kvpress_compression_ratio).")
        for key, value in kwargs.items():
            default = next(f.default for f in dataclasses.fields(cls) if f.name == key)
            if not _same_kind(value, default):
                raise ConfigError(f"kvpress_press_kwargs[{key!r}]={value!r}: {name}'s {key} is "
                                  f"{type(default).__name__}, like its default {default!r}.")
        return cls(compression_ratio=ratio, **kwargs)

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        press = self._press(model, smash_config)
        if smash_config["press_type"] in NEEDS_HUB:
            try:
                press.post_init_from_model(model)
            except Exception as exc:  # noqa: BLE001 - hub / network errors of many kinds
                raise ConfigError(f"kvpress_press_type={smash_config['press_type']!r} loads trained weights from the "
                                  f"Hugging Face hub, which failed ({type(exc).__name__}: {str(exc)[:200]}). Offline, "
                                  f"use {OFFLINE_HINT}.") from exc
        model._kvpress_press = press  # where Pruna's users find the press
        return patch_forward(model, "kv_press", PressedGenerate(press), method="generate")
