"""Issue 36: a channel-pruned MobileNetV2-style net is the dense network with narrower layers and nothing else.

No hooks, parametrizations or mask buffers left behind, plain contiguous fp32 weights, and the same torch calls as
the dense model (only their shapes differ): whatever its CPU latency is, it is the conv kernels', not the result's.
"""

from __future__ import annotations

import collections
import copy

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from slimkit.engines.pruning import L1FilterPruner
from slimkit.engines.speedup import ModelSpeedup
from tests.engines.pruning.conftest import TinyMobileNet

BN_STATS = ("running_mean", "running_var", "num_batches_tracked")


class CallRecorder(TorchFunctionMode):
    """Counts the torch functions a forward calls (conv2d, batch_norm, add, ...), not what they dispatch to."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls[getattr(func, "__name__", str(func))] += 1
        return func(*args, **(kwargs or {}))


def called_ops(model: nn.Module, x: torch.Tensor) -> collections.Counter:
    with torch.no_grad(), CallRecorder() as recorder:
        model(x)
    return recorder.calls


def test_pruned_inverted_residual_net_is_plain_narrower_modules_with_the_dense_op_list():
    torch.manual_seed(0)
    dense, x = TinyMobileNet().eval(), torch.randn(1, 3, 32, 32)
    pruned = copy.deepcopy(dense)
    pruner = L1FilterPruner(pruned, [{"sparsity": 0.3, "op_types": ["Conv2d"]}], dependency_aware=True,
                            dummy_input=x)
    pruner.compress()
    masks = pruner.get_masks()
    small = ModelSpeedup(pruner.unwrap_model(apply_masks=True), x, masks).speedup_model().eval()

    widths = [(m.in_channels, m.out_channels) for m in small.modules() if isinstance(m, nn.Conv2d)]
    dense_widths = [(m.in_channels, m.out_channels) for m in dense.modules() if isinstance(m, nn.Conv2d)]
    assert len(widths) == len(dense_widths) == 8
    assert sum(w[1] for w in widths) < 0.8 * sum(w[1] for w in dense_widths)
    assert [type(m) for m in small.modules()] == [type(m) for m in dense.modules()]
    for name, module in small.named_modules():
        assert not (module._forward_hooks or module._forward_pre_hooks), name
        assert not hasattr(module, "parametrizations"), name
    assert [n for n, _ in small.named_buffers() if not n.endswith(BN_STATS)] == []
    for name, p in small.named_parameters():
        assert p.is_contiguous() and p.dtype == torch.float32, name
    ops = called_ops(small, x)
    assert ops == called_ops(dense, x)
    assert ops["conv2d"] == 8 and ops["batch_norm"] == 8 and ops["add"] == 1
    assert not {"mul", "mul_", "__mul__", "where", "masked_fill"} & set(ops)
