"""``PrunaDataModule``: slimkit's :class:`~slimkit.data.DataModule` under Pruna's name and keyword arguments.

``PrunaDataModule(train_ds=..., val_ds=..., test_ds=..., collate_fn="text_generation_collate",
tokenizer=..., collate_fn_args={...}, dataloader_args={"batch_size": 16})`` and
``PrunaDataModule.from_string("WikiText", tokenizer=..., collate_fn_args=..., dataloader_args=...)`` work as in
Pruna; ``dataloader_args`` become the defaults of every ``*_dataloader()`` call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch.utils.data import DataLoader

from slimkit.data.datamodule import DataModule
from slimkit.errors import DataError

__all__ = ["PrunaDataModule"]


def _args(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DataError(f"{name} must be a dict, e.g. {{'batch_size': 16}}; got {type(value).__name__}.")
    return dict(value)


class PrunaDataModule(DataModule):
    """A :class:`~slimkit.data.DataModule` built with Pruna's argument names (see the module docstring)."""

    def __init__(self, train_ds: Any, val_ds: Any, test_ds: Any, collate_fn: Callable[..., Any] | str,
                 tokenizer: Any = None, collate_fn_args: Mapping[str, Any] | None = None,
                 dataloader_args: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(train_ds, val_ds, test_ds, collate_fn, tokenizer=tokenizer,
                         collate_kwargs=_args(collate_fn_args, "collate_fn_args"), **kwargs)
        self.dataloader_args = _args(dataloader_args, "dataloader_args")

    @classmethod
    def from_string(cls, dataset_name: str, *, tokenizer: Any = None, collate_fn_args: Mapping[str, Any] | None = None,
                    dataloader_args: Mapping[str, Any] | None = None, seed: int = 42,
                    **kwargs: Any) -> PrunaDataModule:
        """A built-in dataset by id (Pruna's ``dataset_name``), with Pruna's argument names."""
        built = DataModule.from_string(dataset_name, tokenizer=tokenizer, seed=seed,
                                       **_args(collate_fn_args, "collate_fn_args"), **kwargs)
        module = cls.__new__(cls)
        module.__dict__.update(built.__dict__)
        module.dataloader_args = _args(dataloader_args, "dataloader_args")
        return module

    def _with_defaults(self, split: str, batch_size: int | None, shuffle: bool, kwargs: dict[str, Any]) -> DataLoader:
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
