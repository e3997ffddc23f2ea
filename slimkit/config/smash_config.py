"""SmashConfig: which algorithm runs in each group, their hyperparameters, and the components they need."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

import slimkit.algorithms  # noqa: F401  (importing it registers every algorithm)
from slimkit.config.files import (
    EXAMPLE_INPUTS_FILE,
    PROCESSOR_DIR,
    SCHEMA_VERSION,
    TOKENIZER_DIR,
    check_payload,
    load_inputs,
    load_pretrained,
    read_config,
    write_config,
)
from slimkit.config.pruna import PrunaConfigFace
from slimkit.core import registry
from slimkit.core.contract import GROUPS, SmashConfigPrefixWrapper
from slimkit.core.devices import resolve_device
from slimkit.core.hyperparameters import describe_allowed, is_legal, to_jsonable
from slimkit.errors import ConfigError, closest


class SmashConfig(PrunaConfigFace):
    """Dictionary-like configuration for :func:`slimkit.smash`.

    Forms: ``SmashConfig()`` then ``cfg["quantizer"] = "int8_dynamic"``; ``SmashConfig(["int8_dynamic"])``;
    ``SmashConfig({"int8_dynamic": {"per_channel": True}})``. Hyperparameters are prefixed with the algorithm
    name (``cfg["int8_dynamic_per_channel"] = True``) and validated against the algorithm's ConfigSpace.
    Pruna's ``cfg.add(...)`` and ``cfg["device"]`` work too (:mod:`slimkit.config.pruna`).
    """

    def __init__(
        self,
        algorithms: list[str] | Mapping[str, Mapping[str, Any]] | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        self._algorithms: dict[str, str | None] = {g: None for g in GROUPS}
        self._hyperparameters: dict[str, Any] = {}
        self.tokenizer: Any = None
        self.processor: Any = None
        self.data: Any = None
        #: id of data recorded in a saved config but not loaded (e.g. a hub dataset while offline)
        self._data_id: str | None = None
        #: inputs for one forward pass (tracing, export, structural speedup); saved with the model when set
        self.example_inputs: Any = None
        self.device = device  # type: ignore[assignment]  (the setter resolves "auto"/None)
        if algorithms is None:
            return
        if isinstance(algorithms, str):
            algorithms = [algorithms]
        if isinstance(algorithms, Mapping):
            for name, hps in algorithms.items():
                self.activate(name)
                if not isinstance(hps, Mapping):
                    raise ConfigError(
                        f"SmashConfig({{{name!r}: {hps!r}}}): hyperparameters must be a dict such as "
                        f"{{{name!r}: {{'<hyperparameter>': value}}}}."
                    )
                self.add(name, hps)  # Pruna's add(name, hyperparameters)
        elif isinstance(algorithms, (list, tuple)):
            for name in algorithms:
                self.activate(name)
        else:
            raise ConfigError(
                f"SmashConfig got {type(algorithms).__name__}; pass a list of algorithm names or a dict "
                "{name: {hyperparameter: value}}."
            )

    # ----------------------------------------------------------------- algorithms and hyperparameters

    @property
    def device(self) -> str:
        """The device smash runs on (``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``)."""
        return self._device

    @device.setter
    def device(self, value: str | torch.device | None) -> None:
        self._device = resolve_device(value)
        #: True when the device was left to slimkit ("auto"/None): smash may then fall back to the CPU
        self.device_auto = value is None or value == "auto"

    def activate(self, name: str) -> None:
        """Activate algorithm ``name`` in its own group."""
        cls = registry.get(name)
        self._algorithms[cls.group] = cls.algorithm_name
        self._alias_defaults(name)

    def _split_key(self, key: str) -> tuple[str, str]:
        """Split a prefixed hyperparameter key into (canonical algorithm, hyperparameter), validating both.

        The prefix may be an alias (``torch_unstructured_sparsity`` reads as ``level_sparsity``); an alias's
        retired hyperparameter names are translated to the algorithm's own.
        """
        owners = [n for n in registry.all_names() if key.startswith(n + "_")] if isinstance(key, str) else []
        if not owners:
            valid = list(GROUPS) + [h["name"] for n in registry.names() for h in registry.info(n)["hyperparameters"]]
            raise ConfigError(
                f"Unknown SmashConfig key {key!r}.{closest(str(key), valid)} Keys are a group "
                f"({', '.join(GROUPS)}) or a hyperparameter prefixed with its algorithm's name, "
                "e.g. 'int8_dynamic_per_channel'. Run `slimkit algorithms` to list them."
            )
        owner = max(owners, key=len)
        cls = registry.get(owner)
        name = cls.algorithm_name
        hp_name = key[len(owner) + 1 :]
        hp_name = cls.renamed_hyperparameters.get(owner, {}).get(hp_name, hp_name)
        hps = {hp.name: hp for hp in cls().get_hyperparameters()}
        if hp_name not in hps:
            allowed = ", ".join(f"{name}_{h}" for h in hps) or "none"
            raise ConfigError(
                f"Algorithm {name!r} has no hyperparameter {hp_name!r} (key {key!r}).{closest(hp_name, hps)} "
                f"Its hyperparameters: {allowed}."
            )
        return name, hp_name

    def _check_key(self, key: Any) -> None:
        if not isinstance(key, str):
            raise ConfigError(f"SmashConfig keys are strings (a group such as 'quantizer' or a prefixed "
                              f"hyperparameter such as 'int8_dynamic_per_channel'); got {key!r}.")

    def __setitem__(self, key: str, value: Any) -> None:
        self._check_key(key)
        if key == "device":  # Pruna's smash_config["device"]
            self.device = value
            return
        if key in self._algorithms:
            group = key if value is None else registry.get(value).group
            if group != key:
                raise ConfigError(f"{value!r} is a {group}, not a {key}; set it with cfg[{group!r}] = {value!r}.")
            if value is None:
                self._algorithms[key] = None
            else:
                self.activate(value)
            return
        name, hp_name = self._split_key(key)
        hp = {h.name: h for h in registry.get(name)().get_hyperparameters()}[hp_name]
        if isinstance(value, list):
            value = tuple(value)
        if not is_legal(hp, value):
            raise ConfigError(
                f"Invalid value {value!r} for {key!r}: allowed is {describe_allowed(hp)} "
                f"(default {to_jsonable(hp.default_value)!r}). {hp.meta.get('desc', '') if hp.meta else ''}".strip()
            )
        self._hyperparameters[f"{name}_{hp_name}"] = value

    def __getitem__(self, key: str) -> Any:
        self._check_key(key)
        if key == "device":
            return self.device
        if key in self._algorithms:
            return self._algorithms[key]
        if key in self._hyperparameters:
            return self._hyperparameters[key]
        name, hp_name = self._split_key(key)
        if f"{name}_{hp_name}" in self._hyperparameters:
            return self._hyperparameters[f"{name}_{hp_name}"]
        return registry.get(name).hyperparameter_defaults()[hp_name]

    def __contains__(self, key: object) -> bool:
        return key in self._algorithms or key in self._hyperparameters

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict()["algorithms"])

    def get_active_algorithms(self) -> list[str]:
        """Active algorithm names in application (stage) order."""
        return registry.order([n for n in self._algorithms.values() if n])

    def hyperparameters_of(self, name: str) -> dict[str, Any]:
        """Un-prefixed hyperparameters of algorithm ``name`` with defaults filled in."""
        name = registry.resolve(name)
        values = registry.get(name).hyperparameter_defaults()
        for key, value in self._hyperparameters.items():
            if key.startswith(name + "_") and self._split_key(key)[0] == name:
                values[key[len(name) + 1 :]] = value
        return values

    def get_prefix_wrapper(self, name: str) -> SmashConfigPrefixWrapper:
        """A view of this config in which ``name``'s hyperparameters are read without the prefix."""
        return SmashConfigPrefixWrapper(self, registry.resolve(name))

    # ----------------------------------------------------------------- components
    def add_tokenizer(self, tokenizer: Any) -> None:
        """Attach a tokenizer (an object, or a local path / hub id loaded with transformers' AutoTokenizer)."""
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = load_pretrained("AutoTokenizer", tokenizer, "tokenizer")
        self.tokenizer = tokenizer
        bind = getattr(self.data, "bind_tokenizer", None)  # data added before its tokenizer (Pruna's order)
        if callable(bind):
            bind(tokenizer)

    def add_processor(self, processor: Any) -> None:
        """Attach a processor (an object, or a local path / hub id loaded with transformers' AutoProcessor)."""
        if isinstance(processor, (str, os.PathLike)):
            processor = load_pretrained("AutoProcessor", processor, "processor")
        self.processor = processor

    def add_data(self, data: Any, collate_fn: Any = None, **kwargs: Any) -> None:
        """Attach data: a built-in id (e.g. ``"Digits"``), ``(train, val, test)`` + ``collate_fn``, or a DataModule."""
        from slimkit.data import make_datamodule

        self.data = make_datamodule(
            data, collate_fn=collate_fn, tokenizer=self.tokenizer, processor=self.processor, **kwargs
        )

    add_dataset = add_data

    def add_example_inputs(self, inputs: Any) -> None:
        """Attach inputs for one forward pass (a Tensor, tuple of Tensors or dict), used to trace or export."""
        ok = isinstance(inputs, torch.Tensor) or (
            isinstance(inputs, (tuple, list, Mapping))
            and all(isinstance(v, torch.Tensor) for v in (inputs.values() if isinstance(inputs, Mapping) else inputs))
        )
        if not ok:
            raise ConfigError(
                f"add_example_inputs got {type(inputs).__name__}; pass a Tensor, a tuple of Tensors (positional "
                "arguments) or a dict of Tensors (keyword arguments)."
            )
        self.example_inputs = dict(inputs) if isinstance(inputs, Mapping) else inputs

    def add_model_defaults(self, zoo_model: Any, data: Any = None) -> list[str]:
        """Add what the active algorithms need from a zoo model (``slimkit.zoo.load(name)``); return what was added.

        Example inputs and the tokenizer are added when the config has none (tracing, export and calibration
        use them). When an active algorithm needs or uses a dataset (training, calibration) and none is set,
        ``data`` is added, else the zoo model's natural offline data (``zoo_model.data``: Digits for the digits
        CNN, PyDocText for the language models, Photos for MobileNetV2). Call it after choosing the algorithms.
        """
        added = []
        if self.example_inputs is None and getattr(zoo_model, "example_inputs", None) is not None:
            self.add_example_inputs(zoo_model.example_inputs)
            added.append("example inputs")
        if self.tokenizer is None and getattr(zoo_model, "tokenizer", None) is not None:
            self.add_tokenizer(zoo_model.tokenizer)
            added.append("tokenizer")
        needs_data = any(registry.get(n).dataset_required or registry.get(n).dataset_used
                         for n in self.get_active_algorithms())
        source = data if data is not None else (getattr(zoo_model, "data", None) if needs_data else None)
        if self.data is None and source is not None:
            self.add_data(source)
            added.append(f"dataset {getattr(self.data, 'name', None) or source}")
        return added

    # ----------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: schema version, active algorithms per group, their hyperparameters, device, data id."""
        active = {g: n for g, n in self._algorithms.items() if n}
        hps = {
            f"{n}_{k}": to_jsonable(v)
            for n in self.get_active_algorithms()
            for k, v in self.hyperparameters_of(n).items()
        }
        data_name = getattr(self.data, "name", None) if self.data is not None else self._data_id
        return {
            "schema_version": SCHEMA_VERSION,
            "algorithms": active,
            "hyperparameters": hps,
            "device": self.device,
            "data": data_name,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> SmashConfig:
        """Rebuild a SmashConfig from :meth:`to_dict` output (validating every key and value again)."""
        cfg = cls(device=check_payload(payload))
        for group, name in payload.get("algorithms", {}).items():
            if group not in GROUPS:
                raise ConfigError(f"SmashConfig 'algorithms' key {group!r} is not a group.{closest(str(group), GROUPS)}"
                                  f" Groups: {', '.join(GROUPS)}.")
            cfg._set_field(f"'algorithms'[{group!r}]", group, name)
        for key, value in payload.get("hyperparameters", {}).items():
            cfg._set_field(f"'hyperparameters'[{key!r}]", key, value)
        data = payload.get("data")
        if data is not None and not isinstance(data, str):
            raise ConfigError(f"SmashConfig 'data' must be a dataset id (a string) or null; got {data!r}.")
        cfg._data_id = data
        return cfg

    def _set_field(self, field: str, key: str, value: Any) -> None:
        """``self[key] = value`` for a saved config's entry; an error names the field it came from."""
        try:
            self[key] = value
        except ConfigError as exc:
            raise type(exc)(f"SmashConfig {field}: {exc}") from None

    def restore_data(self) -> None:
        """Load the built-in dataset a saved config names (offline ones only; others keep just their id)."""
        from slimkit.data import DataModule

        if self.data is not None or self._data_id not in ("Digits", "PyDocText"):
            return
        if self._data_id == "PyDocText" and self.tokenizer is None:
            return
        self.data = DataModule.from_string(self._data_id, tokenizer=self.tokenizer)

    def save_to_json(self, path: str | os.PathLike, extra: Mapping[str, Any] | None = None) -> Path:
        """Write the config as JSON: a ``path`` ending in ``.json`` is that file, anything else a directory.

        In a directory the file is ``smash_config.json`` (Pruna's form). The tokenizer/processor and example
        inputs, if any, go beside the JSON file. ``extra`` adds top-level keys (the engine stores the applied
        algorithms and the base model there). Returns the JSON file's path.
        """
        return write_config(path, {**self.to_dict(), **dict(extra or {})}, self.tokenizer, self.processor,
                            self.example_inputs)

    def load_from_json(self, path: str | os.PathLike) -> None:
        """Replace this config's content by the one saved in directory (or file) ``path``."""
        other = SmashConfig.from_json(path)
        self.__dict__.update(other.__dict__)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> SmashConfig:
        """Load a SmashConfig saved by :meth:`save_to_json` (a directory or the JSON file itself)."""
        file, payload = read_config(path)
        try:
            cfg = cls.from_dict(payload)
        except ConfigError as exc:
            raise type(exc)(f"{file}: {exc}") from None
        folder = file.parent
        if (folder / TOKENIZER_DIR).is_dir():
            cfg.add_tokenizer(str(folder / TOKENIZER_DIR))
        if (folder / PROCESSOR_DIR).is_dir():
            cfg.add_processor(str(folder / PROCESSOR_DIR))
        if (folder / EXAMPLE_INPUTS_FILE).is_file():
            cfg.example_inputs = load_inputs(folder / EXAMPLE_INPUTS_FILE)
        cfg.restore_data()
        return cfg

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SmashConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        d = self.to_dict()
        return (f"SmashConfig(algorithms={d['algorithms']}, hyperparameters={d['hyperparameters']}, "
                f"device={self.device!r})")
