"""DataModule: train/val/test datasets plus the collate function that batches them (Pruna's PrunaDataModule).

``make_datamodule`` is what ``SmashConfig.add_data`` calls: a built-in id, a ``(train, val, test)`` tuple
with a collate function, or a ready DataModule. Datasets are checked against their collate function's
item format when the module is built, so a wrong column fails here with a message, not in a worker.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from torch.utils.data import DataLoader

from slimkit.data.collate import COLLATE_FORMATS, TOKENIZER_COLLATES, check_item_fields, resolve_collate
from slimkit.data.hub import hub_offline, offline_requested
from slimkit.data.registry import DatasetSpec, lookup
from slimkit.data.utils import column_names, dataset_size, first_item, is_iterable_dataset, limit_dataset
from slimkit.errors import DataError, MissingPackageError, closest

_SPLITS = ("train", "val", "test")


def _as_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object; a string is loaded with ``AutoTokenizer.from_pretrained`` (local folder or cache)."""
    if not isinstance(tokenizer, str):
        return tokenizer
    try:
        from transformers import AutoTokenizer

        with hub_offline():
            return AutoTokenizer.from_pretrained(tokenizer)
    except Exception as exc:
        raise DataError(
            f"Could not load the tokenizer {tokenizer!r}: {type(exc).__name__}: {exc}. Pass a local folder "
            "or a tokenizer object (AutoTokenizer.from_pretrained(path))."
        ) from exc


def _bind_collate(
    collate_fn: str | Callable[..., Any], tokenizer: Any, processor: Any, kwargs: dict[str, Any]
) -> Callable[..., Any]:
    """Resolve a collate name and bind tokenizer / processor / kwargs, checking kwarg names up front."""
    if isinstance(collate_fn, str):
        function = resolve_collate(collate_fn)
        if collate_fn in TOKENIZER_COLLATES and tokenizer is None and "tokenizer" not in kwargs:
            raise DataError(
                f"{collate_fn!r} needs a tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(path) "
                "(or call SmashConfig.add_tokenizer(...) before add_data)."
            )
    elif callable(collate_fn):
        function = collate_fn
    else:
        raise DataError(f"collate_fn must be a collate function name or a callable; got {type(collate_fn).__name__}.")
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):  # builtins / C callables: bind only what was asked for
        return functools.partial(function, **kwargs) if kwargs else function
    bound = dict(kwargs)
    for name, value in (("tokenizer", tokenizer), ("processor", processor)):
        if name in params and value is not None:
            bound.setdefault(name, value)
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    accepted = list(params)[1:]
    unknown = [key for key in bound if key not in accepted]
    if unknown and not accepts_any:
        label = collate_fn if isinstance(collate_fn, str) else getattr(function, "__name__", "collate_fn")
        hint = closest(unknown[0], accepted)
        raise DataError(
            f"Unknown collate argument(s) {unknown} for {label!r}.{hint} It accepts: {', '.join(accepted) or 'none'}."
        )
    return functools.partial(function, **bound) if bound else function


class DataModule:
    """Train / val / test datasets with a collate function; hands out DataLoaders (Pruna's PrunaDataModule)."""

    def __init__(
        self,
        train: Any,
        val: Any,
        test: Any,
        collate_fn: Callable[..., Any] | str,
        *,
        tokenizer: Any = None,
        processor: Any = None,
        name: str = "custom",
        collate_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if train is None:
            raise DataError("A DataModule needs a train dataset; got None.")
        self.train, self.val, self.test = train, val, test
        self.name = name
        self.tokenizer = _as_tokenizer(tokenizer)
        self.processor = processor
        self.collate_kwargs = dict(collate_kwargs or {})
        self.collate_fn_name = collate_fn if isinstance(collate_fn, str) else getattr(collate_fn, "__name__", "custom")
        self.collate_fn = _bind_collate(collate_fn, self.tokenizer, processor, self.collate_kwargs)
        for split in _SPLITS:
            self._check(split)

    def _check(self, split: str) -> None:
        """Check one split's first item against the collate format, then collate it once."""
        dataset = getattr(self, split)
        if dataset is None:
            return
        item = first_item(dataset)
        name = self.collate_fn_name
        if item is not None and name in COLLATE_FORMATS and not isinstance(item, Mapping):
            raise DataError(
                f"The {split} items are {type(item).__name__}, but {name!r} needs dict items like "
                f"{COLLATE_FORMATS[name][2]}; wrap them (e.g. DictDataset or datasets.Dataset.from_dict) "
                "or pass a collate_fn callable that reads your items."
            )
        fields = list(item) if item is not None else column_names(dataset)
        check_item_fields(name, fields, split)
        if item is None:
            return
        try:
            self.collate_fn([item])
        except Exception as exc:
            raise DataError(
                f"collate_fn {name!r} failed on the first {split} item: {type(exc).__name__}: {exc}"
            ) from exc

    def _loader(self, split: str, batch_size: int, shuffle: bool, **kwargs: Any) -> DataLoader:
        dataset = getattr(self, split)
        if dataset is None:
            raise DataError(f"DataModule {self.name!r} has no {split} dataset; pass one when building it.")
        if is_iterable_dataset(dataset):
            shuffle = False  # streams cannot be shuffled by index
        kwargs.setdefault("collate_fn", self.collate_fn)
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **kwargs)

    def train_dataloader(self, batch_size: int = 8, shuffle: bool = True, **kwargs: Any) -> DataLoader:
        """DataLoader over the train split (shuffled by default; extra kwargs go to ``DataLoader``)."""
        return self._loader("train", batch_size, shuffle, **kwargs)

    def val_dataloader(self, batch_size: int = 8, shuffle: bool = False, **kwargs: Any) -> DataLoader:
        """DataLoader over the validation split (in order by default)."""
        return self._loader("val", batch_size, shuffle, **kwargs)

    def test_dataloader(self, batch_size: int = 8, shuffle: bool = False, **kwargs: Any) -> DataLoader:
        """DataLoader over the test split (in order by default)."""
        return self._loader("test", batch_size, shuffle, **kwargs)

    def limit_datasets(self, n: int | tuple[int, int, int]) -> None:
        """Keep only the first ``n`` items of each split (or ``(n_train, n_val, n_test)``), e.g. for fast runs."""
        if isinstance(n, (tuple, list)):
            if len(n) != 3:
                raise DataError(f"limit_datasets takes an int or (train, val, test) ints; got {n!r}.")
            limits = tuple(n)
        else:
            limits = (n, n, n)
        for split, limit in zip(_SPLITS, limits, strict=True):
            if getattr(self, split) is not None:
                setattr(self, split, limit_dataset(getattr(self, split), limit))

    @classmethod
    def from_string(
        cls,
        dataset_id: str,
        *,
        tokenizer: Any = None,
        processor: Any = None,
        seed: int = 42,
        collate_fn: str | Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> DataModule:
        """Build a built-in dataset by id (see ``list_datasets()``).

        ``kwargs`` named like the dataset loader's options (e.g. ``image_dir`` for COCO) go to the loader;
        the rest are collate arguments (e.g. ``max_seq_len``, ``img_size``) and override the defaults.
        ``collate_fn`` replaces the dataset's own collate function (its default arguments are then dropped).
        Hub ids that cannot be reached raise a DataError explaining how to pass local data instead.
        """
        name, spec = lookup(dataset_id)
        loader_params = set(inspect.signature(spec.loader).parameters) - {"seed"}
        loader_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in loader_params}
        collate_kwargs = {**spec.collate_kwargs, **kwargs} if collate_fn is None else kwargs
        try:
            train, val, test = spec.loader(seed=seed, **loader_kwargs)
        except (DataError, MissingPackageError):
            raise
        except Exception as exc:
            raise DataError(_load_failure_message(name, spec, exc)) from exc
        return cls(
            train,
            val,
            test,
            collate_fn or spec.collate,
            tokenizer=tokenizer,
            processor=processor,
            name=name,
            collate_kwargs=collate_kwargs,
        )

    @classmethod
    def from_datasets(
        cls,
        datasets: tuple[Any, Any, Any],
        collate_fn: str | Callable[..., Any],
        *,
        tokenizer: Any = None,
        processor: Any = None,
        **collate_kwargs: Any,
    ) -> DataModule:
        """Build from your own ``(train, val, test)`` datasets and a collate function name or callable."""
        if not isinstance(datasets, (tuple, list)) or len(datasets) != 3:
            raise DataError(
                f"from_datasets needs a (train, val, test) tuple; got {type(datasets).__name__}"
                f"{f' of length {len(datasets)}' if isinstance(datasets, (tuple, list)) else ''}. "
                "Split one dataset with split_train_into_train_val_test(dataset)."
            )
        train, val, test = datasets
        return cls(
            train, val, test, collate_fn, tokenizer=tokenizer, processor=processor, collate_kwargs=collate_kwargs
        )

    def __repr__(self) -> str:
        sizes = ", ".join(f"{split}={_size_text(getattr(self, split))}" for split in _SPLITS)
        return f"DataModule(name={self.name!r}, {sizes}, collate_fn={self.collate_fn_name!r})"


def _size_text(dataset: Any) -> str:
    if dataset is None:
        return "None"
    size = dataset_size(dataset)
    return "stream" if size is None else str(size)


def _load_failure_message(name: str, spec: DatasetSpec, exc: BaseException) -> str:
    """Explain a built-in dataset that failed to load and how to pass local data instead."""
    unreachable = isinstance(exc, (ConnectionError, OSError, TimeoutError)) or "Offline" in type(exc).__name__
    reason = (
        "the Hugging Face Hub is not reachable offline"
        + (" (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set)" if offline_requested() else "")
        + " and the dataset is not in the local datasets cache"
        if unreachable
        else "loading it failed"
    )
    fmt = COLLATE_FORMATS[spec.collate][2]
    offline_ids = "'Digits', 'PyDocText'"
    return (
        f"Built-in dataset {name!r} comes from the {spec.source}: {reason} ({type(exc).__name__}: "
        f"{str(exc)[:300]}). Pass your own data instead: make_datamodule((train, val, test), "
        f"collate_fn={spec.collate!r}) with dict items like {fmt} (e.g. datasets.Dataset.from_dict(...) split by "
        f"split_train_into_train_val_test), or a DataModule. Built-in ids that work offline: {offline_ids}."
    )


def make_datamodule(
    data: Any,
    *,
    collate_fn: str | Callable[..., Any] | None = None,
    tokenizer: Any = None,
    processor: Any = None,
    **kwargs: Any,
) -> DataModule:
    """Turn what ``SmashConfig.add_data`` receives into a DataModule.

    ``data`` is a built-in id (``"Digits"``), a ``(train, val, test)`` tuple together with ``collate_fn``
    (a name from ``COLLATE_FUNCTIONS`` or a callable), or a DataModule (returned as is). ``kwargs`` are
    collate arguments (and loader options for built-in ids).
    """
    if isinstance(data, DataModule):
        bind = getattr(data, "bind_tokenizer", None)  # a face's module built before its tokenizer was known
        if callable(bind):
            bind(tokenizer)
        return data
    if isinstance(data, str):
        return DataModule.from_string(data, tokenizer=tokenizer, processor=processor, collate_fn=collate_fn, **kwargs)
    if isinstance(data, (tuple, list)):
        if any(isinstance(part, Mapping) for part in data):
            raise DataError(
                "make_datamodule got a list of items, i.e. one dataset, not a (train, val, test) tuple; "
                "split it first with split_train_into_train_val_test(dataset)."
            )
        if collate_fn is None:
            raise DataError(
                "A (train, val, test) tuple needs collate_fn=...: one of "
                f"{', '.join(sorted(COLLATE_FORMATS))}, or your own callable(batch) -> batch."
            )
        return DataModule.from_datasets(data, collate_fn, tokenizer=tokenizer, processor=processor, **kwargs)  # type: ignore[arg-type]
    raise DataError(
        f"Cannot use data of type {type(data).__name__}. Pass a built-in dataset id (see list_datasets()), "
        "a (train, val, test) tuple with collate_fn=..., or a DataModule."
    )
