"""A second device on every machine, to catch wrong-device bugs without a GPU: ``fakegpu``.

torch's PrivateUse1 backend is renamed ``fakegpu`` and set up as a Python backend (device guard, hooks, a backend
module), so ``torch.device("fakegpu")``, ``tensor.to("fakegpu")``, ``module.to("fakegpu")`` and factories such as
``torch.zeros(3, device="fakegpu")`` work everywhere. A ``fakegpu`` tensor is a :class:`FakeGpuTensor`: a wrapper
subclass that reports the ``fakegpu:0`` device and keeps its values in a CPU tensor; every op on it runs on that CPU
tensor through ``__torch_dispatch__`` and hands back ``fakegpu`` tensors.

What makes it a test: an op that mixes a ``fakegpu`` tensor with a CPU tensor raises the error CUDA raises
("Expected all tensors to be on the same device"), with the same exceptions CUDA makes: CPU scalars (0-dim
tensors) combine with anything, copies cross devices, and advanced indexing takes CPU indices. Code that leaves a
captured input, an index or an accumulator on the CPU while the weights sit on the accelerator fails here as it
fails on a GPU. Values are computed by the CPU kernels, so results equal a CPU run.

Use :func:`enable` (idempotent) before naming the device. It changes process-wide state (``torch.accelerator``
then reports ``fakegpu``; ``module.to`` swaps parameters in place so tied weights stay tied), so
``tests/test_fake_device.py`` runs its cases in a child process. Not covered, and refused loudly: ops that change
a fakegpu tensor's shape in place (``unsqueeze_``, an ``out=`` that resizes), NumPy views (as on CUDA); nor is
``torch.compile`` (Dynamo traces a tensor subclass itself).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

#: the fake accelerator's device type
DEVICE_TYPE = "fakegpu"

aten = torch.ops.aten
_lock = threading.Lock()
_state: dict[str, Any] = {}

#: ops that may take CPU tensors beside fakegpu ones, as on CUDA: copies across devices and CPU indices
_MIXED_OK = {
    aten.copy_.default, aten._copy_from.default, aten._copy_from_and_resize.default, aten._to_copy.default,
    aten.index.Tensor, aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default,
    aten.lift_fresh.default, aten.lift_fresh_copy.default,
}
#: ops that change a tensor's shape in place: the wrapper's metadata cannot follow, so they are refused loudly
_METADATA_INPLACE = {aten.resize_.default, aten.set_.source_Tensor, aten.set_.source_Storage,
                     aten.set_.source_Storage_storage_offset, aten.as_strided_.default, aten.t_.default,
                     aten.transpose_.default, aten.squeeze_.default, aten.squeeze_.dim, aten.unsqueeze_.default,
                     aten.swapdims_.default, aten.swapaxes_.default}


class FakeGpuTensor(torch.Tensor):
    """A tensor on the ``fakegpu`` device whose values live in the CPU tensor ``cpu_data`` (see the module doc)."""

    cpu_data: torch.Tensor

    @staticmethod
    def __new__(cls, data: torch.Tensor, requires_grad: bool = False) -> FakeGpuTensor:  # noqa: D102
        out = torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            layout=data.layout, device=_state["device"], requires_grad=requires_grad)
        out.cpu_data = data
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    # A "traceable" wrapper (``module.to`` swaps such tensors into the Parameters it converts); see enable()
    def __tensor_flatten__(self) -> tuple[list[str], None]:  # noqa: D105
        return ["cpu_data"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: Any, outer_size: Any, outer_stride: Any) -> FakeGpuTensor:  # noqa: D105
        return FakeGpuTensor(inner["cpu_data"])

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # noqa: D105
        return f"FakeGpuTensor({self.cpu_data!r}, device='{_state['device']}')"

    def __deepcopy__(self, memo: dict) -> FakeGpuTensor:  # noqa: D105  (views keep sharing: the CPU copy's memo)
        if id(self) not in memo:
            new = FakeGpuTensor(copy.deepcopy(self.cpu_data.detach(), memo), requires_grad=self.requires_grad)
            for key, value in self.__dict__.items():
                if key != "cpu_data":
                    setattr(new, key, copy.deepcopy(value, memo))
            if self.grad is not None:
                new.grad = copy.deepcopy(self.grad, memo)
            memo[id(self)] = new
        return memo[id(self)]

    def untyped_storage(self) -> torch.UntypedStorage:  # noqa: D102  (the CPU data's: aliasing checks hold)
        return self.cpu_data.untyped_storage()

    def data_ptr(self) -> int:  # noqa: D102
        return self.cpu_data.data_ptr()

    def numpy(self, *, force: bool = False) -> Any:  # noqa: D102  (as CUDA: no NumPy view of device memory)
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")

    def tolist(self) -> Any:  # noqa: D102  (torch refuses tolist() on subclasses; CUDA tensors allow it)
        return self.cpu_data.tolist()

    @property
    def data(self) -> torch.Tensor:  # noqa: D102
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        if not isinstance(value, FakeGpuTensor):
            raise RuntimeError(f"fakegpu: assigning a {value.device} tensor to the .data of a fakegpu tensor")
        torch.Tensor.data.__set__(self, value)
        self.cpu_data = value.cpu_data

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        return _dispatch(func, args, kwargs or {})


def _is_fake_device(device: Any) -> bool:
    return torch.device(device).type == DEVICE_TYPE


def _check_devices(func: Any, flat: list[Any]) -> None:
    if func in _MIXED_OK:
        return
    fake = any(isinstance(a, FakeGpuTensor) for a in flat)
    cpu = [a for a in flat if isinstance(a, torch.Tensor) and not isinstance(a, FakeGpuTensor) and a.dim() > 0]
    if fake and cpu:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {_state['device']} "
            f"and {cpu[0].device}! (in {func}: a CPU tensor of shape {tuple(cpu[0].shape)} met a fakegpu tensor)")


def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    if func is aten.resize_.default and list(args[0].shape) == list(args[1]):
        return args[0]  # an out= argument of the right size: nothing changes
    if func in _METADATA_INPLACE:
        raise RuntimeError(f"fakegpu does not support {func} (it changes a tensor's shape in place)")
    flat, _ = pytree.tree_flatten((args, kwargs))
    _check_devices(func, flat)
    wrap = any(isinstance(a, FakeGpuTensor) for a in flat)
    args, kwargs, named = _device_to_cpu(func, args, kwargs)
    if named is not None:  # factories and copies naming a device: fakegpu runs on the CPU, wrapped
        wrap = _is_fake_device(named)
    unwrapped_args, unwrapped_kwargs = pytree.tree_map_only(FakeGpuTensor, lambda t: t.cpu_data, (args, kwargs))
    if func is aten.histc.default and not unwrapped_args[0].is_floating_point():
        # CUDA's histc counts integer tensors (transformers' grouped-mm MoE path uses it off the CPU); the CPU's
        # refuses them, so count their float values (exact for the small integers it bins)
        unwrapped_args = (unwrapped_args[0].float(), *unwrapped_args[1:])
    out = func(*unwrapped_args, **unwrapped_kwargs)
    if not func._schema.returns:
        return None
    mutated = _mutated_returns(func, args, kwargs)
    if mutated is not None:
        for t in mutated if isinstance(mutated, tuple) else (mutated,):
            if isinstance(t, FakeGpuTensor) and (t.shape != t.cpu_data.shape or t.stride() != t.cpu_data.stride()):
                raise RuntimeError(f"fakegpu: {func} resized its fakegpu output in place, which a wrapper tensor "
                                   "cannot follow; give it an output of the right size, or register the factory in "
                                   "tests/fake_device.py (_FACTORIES)")
        return mutated
    if not wrap:
        return out
    if _is_view(func) and torch.is_inference_mode_enabled() and not args[0].is_inference():
        with torch.inference_mode(False):  # a view of a normal tensor is a normal tensor, in inference mode too
            return _wrap(out)
    return _wrap(out)


def _wrap(out: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: t if isinstance(t, FakeGpuTensor) else FakeGpuTensor(t), out)


def _device_to_cpu(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict, Any]:
    """``args``/``kwargs`` with a ``device`` argument (positional or keyword) set to the CPU, and the device named."""
    for i, argument in enumerate(func._schema.arguments):
        if argument.name != "device":
            continue
        if i < len(args) and not argument.kwarg_only:
            if args[i] is not None:
                return (*args[:i], torch.device("cpu"), *args[i + 1:]), kwargs, args[i]
        elif kwargs.get("device") is not None:
            return args, {**kwargs, "device": torch.device("cpu")}, kwargs["device"]
    return args, kwargs, None


def _is_view(func: Any) -> bool:
    """True when ``func`` returns a view of its first argument (``slice``, ``expand``, ``view``, ``split``...)."""
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _mutated_returns(func: Any, args: tuple, kwargs: dict) -> Any:
    """For an in-place or ``out=`` op: the argument objects it returns (the caller's own tensors), else ``None``."""
    schema = func._schema
    returns = []
    for ret in schema.returns:
        alias = ret.alias_info
        if alias is None or not alias.is_write:
            return None
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write and \
                    set(arg.alias_info.before_set) & set(alias.before_set):
                returns.append(args[i] if i < len(args) and not arg.kwarg_only else kwargs[arg.name])
                break
        else:
            return None
    return returns[0] if len(returns) == 1 else tuple(returns)


#: factories without a tensor argument whose torch implementation resizes an empty output: run on the CPU whole
_FACTORIES = ("arange", "arange.start", "arange.start_step", "range", "range.step", "linspace", "logspace", "eye",
              "eye.m", "tril_indices", "triu_indices")


def _factory(name: str) -> Any:
    overload = getattr(aten, name.split(".")[0]), (name.split(".") + ["default"])[1]

    def run(*args: Any, **kwargs: Any) -> FakeGpuTensor:
        return FakeGpuTensor(getattr(*overload)(*args, **{**kwargs, "device": torch.device("cpu")}))

    return run


def _empty(size: list[int], *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
           memory_format: Any = None) -> FakeGpuTensor:
    return FakeGpuTensor(torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format))


def _empty_strided(size: list[int], stride: list[int], *, dtype: Any = None, layout: Any = None, device: Any = None,
                   pin_memory: Any = None) -> FakeGpuTensor:
    return FakeGpuTensor(torch.empty_strided(size, stride, dtype=dtype, layout=layout))


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """A copy that reaches the backend itself (``torch.tensor(..., device="fakegpu")`` skips Python dispatch)."""
    unwrap = [t.cpu_data if isinstance(t, FakeGpuTensor) else t for t in (src, dst)]
    unwrap[1].copy_(unwrap[0])
    return dst


def enable() -> torch.device:
    """Register the ``fakegpu`` device (once per process) and return ``torch.device("fakegpu", 0)``."""
    with _lock:
        if "device" in _state:
            return _state["device"]
        name = torch._C._get_privateuse1_backend_name()
        if name not in ("privateuseone", DEVICE_TYPE):
            raise RuntimeError(f"PrivateUse1 is already the {name!r} backend; the fakegpu device needs it free.")
        if name == "privateuseone":
            _setup_privateuseone_for_python_backend(DEVICE_TYPE)
        _state["device"] = torch.device(DEVICE_TYPE, 0)
        # module.to() across fakegpu and the CPU keeps each Parameter object (its contents swapped), so tied weights
        # (an embedding and its head) stay one object as on CUDA, where set_data moves them in place
        torch.__future__.set_swap_module_params_on_conversion(True)
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("empty.memory_format", _empty, "PrivateUse1")
        lib.impl("empty_strided", _empty_strided, "PrivateUse1")
        lib.impl("_copy_from", _copy_from, "PrivateUse1")
        for name in _FACTORIES:
            lib.impl(name, _factory(name), "PrivateUse1")
        _state["library"] = lib
        return _state["device"]
