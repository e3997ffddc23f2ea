"""SkippedBase: what a config read from a base file of another MMEngine-based package, which slimkit skips."""

from __future__ import annotations

from typing import Any


class SkippedBase:
    """A value a config read from a base file slimkit skipped (one of another MMEngine-based package).

    ``sources``: the skipped base files; ``path``: what was read (``"model.neck"``). Reading an attribute of
    it gives another placeholder, and so does arithmetic with it (``_base_...lr * lr_ratio``); assigning one is
    ignored. :func:`slimkit.faces.mmrazor.build` refuses to build it and says which argument to pass instead.
    """

    slimkit_placeholder = True

    def __init__(self, sources: tuple[str, ...], path: str) -> None:
        self.sources, self.path = tuple(sources), path

    def child(self, name: str) -> SkippedBase:
        """The placeholder of ``self.<name>``."""
        return SkippedBase(self.sources, f"{self.path}.{name}")

    def __deepcopy__(self, memo: dict[int, Any]) -> SkippedBase:
        """Placeholders are immutable: the copy is the object itself."""
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SkippedBase) and (other.sources, other.path) == (self.sources, self.path)

    def __hash__(self) -> int:
        return hash((self.sources, self.path))

    def __repr__(self) -> str:
        return f"<_base_.{self.path} from the skipped base {' / '.join(self.sources)}>"

    def _op(self, symbol: str, other: Any, reflected: bool = False) -> SkippedBase:
        """Arithmetic on a skipped value (``_base_.optim_wrapper.optimizer.lr * lr_ratio``) is skipped too."""
        other_text = other.path if isinstance(other, SkippedBase) else repr(other)
        text = f"{other_text} {symbol} {self.path}" if reflected else f"{self.path} {symbol} {other_text}"
        return SkippedBase(self.sources, f"({text})")


def _arithmetic(symbol: str, reflected: bool) -> Any:
    def method(self: SkippedBase, other: Any) -> SkippedBase:
        return self._op(symbol, other, reflected)

    return method


for _symbol, _name in (("+", "add"), ("-", "sub"), ("*", "mul"), ("/", "truediv"), ("//", "floordiv")):
    setattr(SkippedBase, f"__{_name}__", _arithmetic(_symbol, False))
    setattr(SkippedBase, f"__r{_name}__", _arithmetic(_symbol, True))
