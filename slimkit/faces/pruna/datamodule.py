"""``PrunaDataModule``: slimkit's :class:`~slimkit.data.DataModule` under Pruna's name and keyword arguments.

``PrunaDataModule(train_ds, val_ds, test_ds, collate_fn, dataloader_args)`` (Pruna's order),
``PrunaDataModule.from_datasets((train, val, test), "text_generation_collate", tokenizer=...,
collate_fn_args={"max_seq_len": 512}, dataloader_args={"batch_size": 16})`` and
``PrunaDataModule.from_string("WikiText", tokenizer=..., collate_fn_args=..., dataloader_args=...)`` work as in
Pruna; ``dataloader_args`` become the defaults of every ``*_dataloader()`` call. The tokenizer is taken the way
Pruna takes it: ``tokenizer=``, or ``collate_fn_args["tokenizer"]``, or -- for a module built with a tokenizer
collate and neither -- the SmashConfig's (``cfg.add_tokenizer(tok)`` before or after ``cfg.add_data(data)``);
``from_datasets`` sets ``max_seq_len`` from ``tokenizer.model_max_length`` unless ``collate_fn_args`` has one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from torch.utils.data import DataLoader

from slimkit.data.collate import TOKENIZER_COLLATES
from slimkit.data.datamodule import DataModule
from slimkit.errors import DataError, check_int, closest

#: a ``model_max_length`` above this means "no limit" (transformers' sentinel is 1e30), as in Pruna
_NO_LIMIT = 1e10

__all__ = ["PrunaDataModule"]


def _args(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DataError(f"{name} must be a dict, e.g. {{'batch_size': 16}}; got {type(value).__name__}.")
    return dict(value)


#: DataLoader options ``dataloader_args`` may set (the dataset and collate function are the module's own)
_LOADER_OPTIONS = tuple(p for p in inspect.signature(DataLoader.__init__).parameters
                        if p not in ("self", "dataset", "collate_fn", "shuffle"))


def _loader_args(value: Any) -> dict[str, Any]:
    """``dataloader_args`` checked up front: DataLoader's own option names, a batch size >= 1, workers >= 0."""
    args = _args(value, "dataloader_args")
    unknown = [k for k in args if k not in _LOADER_OPTIONS]
    if unknown:
        hint = closest(str(unknown[0]), _LOADER_OPTIONS)
        raise DataError(f"dataloader_args has {unknown}, which DataLoader does not take.{hint} It takes: "
                        f"{', '.join(_LOADER_OPTIONS)}.")
    for key, low in (("batch_size", 1), ("num_workers", 0)):
        if key in args:
            check_int(f"dataloader_args['{key}']", args[key], low, error=DataError)
    return args


class PrunaDataModule(DataModule):
    """A :class:`~slimkit.data.DataModule` built with Pruna's argument names (see the module docstring)."""

    def __init__(self, train_ds: Any, val_ds: Any, test_ds: Any, collate_fn: Callable[..., Any] | str,
                 dataloader_args: Mapping[str, Any] | None = None, *, tokenizer: Any = None,
                 collate_fn_args: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        args = _args(collate_fn_args, "collate_fn_args")
        tokenizer = tokenizer if tokenizer is not None else args.pop("tokenizer", None)
        self.dataloader_args = _loader_args(dataloader_args)
        self._pending: tuple[Any, ...] | None = None
        if tokenizer is None and isinstance(collate_fn, str) and collate_fn in TOKENIZER_COLLATES:
            # Pruna's user manual builds the module without a tokenizer and adds it to the SmashConfig
            self._pending = (collate_fn, args, kwargs)
            self.train, self.val, self.test, self.name = train_ds, val_ds, test_ds, kwargs.get("name", "custom")
            self.tokenizer, self.processor, self.collate_kwargs = None, None, args
            self.collate_fn_name, self.collate_fn = collate_fn, None
            return
        super().__init__(train_ds, val_ds, test_ds, collate_fn, tokenizer=tokenizer, collate_kwargs=args, **kwargs)

    def bind_tokenizer(self, tokenizer: Any) -> None:
        """Give a module that was built without its tokenizer the SmashConfig's (no-op once it has one)."""
        if self._pending is None or tokenizer is None:
            return
        collate_fn, args, kwargs = self._pending  # the splits as they are now (limit_datasets may have cut them)
        DataModule.__init__(self, self.train, self.val, self.test, collate_fn, tokenizer=tokenizer,
                            collate_kwargs=args, **kwargs)
        self._pending = None

    @classmethod
    def from_datasets(cls, datasets: tuple[Any, Any, Any] | list[Any], collate_fn: str | Callable[..., Any],
                      tokenizer: Any = None, collate_fn_args: Mapping[str, Any] | None = None,
                      dataloader_args: Mapping[str, Any] | None = None, **kwargs: Any) -> PrunaDataModule:
        """Your own ``(train, val, test)`` datasets with a collate name, as Pruna's ``from_datasets`` takes them."""
        if not isinstance(datasets, (tuple, list)) or len(datasets) != 3:
            raise DataError(f"from_datasets needs datasets=(train, val, test), exactly 3; got {type(datasets).__name__}"
                            f"{f' of length {len(datasets)}' if isinstance(datasets, (tuple, list)) else ''}.")
        args = _args(collate_fn_args, "collate_fn_args")
        tokenizer = tokenizer if tokenizer is not None else args.pop("tokenizer", None)
        limit = getattr(tokenizer, "model_max_length", None)
        if tokenizer is not None and "max_seq_len" not in args and isinstance(limit, int) and limit <= _NO_LIMIT:
            args["max_seq_len"] = limit
        train, val, test = datasets
        return cls(train, val, test, collate_fn, dataloader_args, tokenizer=tokenizer, collate_fn_args=args, **kwargs)

    @classmethod
    def from_string(cls, dataset_name: str, *, tokenizer: Any = None, collate_fn_args: Mapping[str, Any] | None = None,
                    dataloader_args: Mapping[str, Any] | None = None, seed: int = 42,
                    **kwargs: Any) -> PrunaDataModule:
        """A built-in dataset by id (Pruna's ``dataset_name``), with Pruna's argument names."""
        built = DataModule.from_string(dataset_name, tokenizer=tokenizer, seed=seed,
                                       **_args(collate_fn_args, "collate_fn_args"), **kwargs)
        module = cls.__new__(cls)
        module.__dict__.update(built.__dict__)
        module.dataloader_args, module._pending = _loader_args(dataloader_args), None
        return module

    def _with_defaults(self, split: str, batch_size: int | None, shuffle: bool, kwargs: dict[str, Any]) -> DataLoader:
        if self._pending is not None:
            raise DataError(f"This PrunaDataModule's {self.collate_fn_name!r} needs a tokenizer: pass tokenizer=... "
                            "(or collate_fn_args={'tokenizer': tok}), or add the data to a SmashConfig that has one "
                            "(cfg.add_tokenizer(tok); cfg.add_data(data)).")
        options = {**self.dataloader_args, **kwargs}
        size = options.pop("batch_size", 8) if batch_size is None else batch_size
        options.pop("batch_size", None)
        return self._loader(split, size, shuffle, **options)

    def train_dataloader(self, batch_size: int | None = None, shuffle: bool = True, **kwargs: Any) -> DataLoader:
        """Train DataLoader; ``dataloader_args`` fill what the call does not give."""
        return self._with_defaults("train", batch_size, shuffle, kwargs)

    def val_dataloader(self, batch_size: int | None = None, shuffle: bool = False, **kwargs: Any) -> DataLoader:
        """Validation DataLoader; ``dataloader_args`` fill what the call does not give."""
        return self._with_defaults("val", batch_size, shuffle, kwargs)

    def test_dataloader(self, batch_size: int | None = None, shuffle: bool = False, **kwargs: Any) -> DataLoader:
        """Test DataLoader; ``dataloader_args`` fill what the call does not give."""
        return self._with_defaults("test", batch_size, shuffle, kwargs)
