"""``sub_model``: build a fixed subnet from a supernet and a subnet file (MMRazor's ``sub_model`` builder).

MMRazor's subnet configs read ``model = dict(type='sub_model', cfg=<supernet config>, fix_subnet='X.yaml')``.
Here the supernet is yours (``build(cfg.model, architecture=supernet)`` or ``cfg=supernet``), trained; the
result is the exported plain module of that subnet (no mutables left), with the supernet's weights.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from slimkit.core.registry import build_module, register_component
from slimkit.engines.nas import NasMutator, export_subnet, read_subnet
from slimkit.engines.nas.mutator import plain_choices, unwrap
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.pruning.deploy import mutator_structure, read_structure, shrink_to_structure
from slimkit.faces.mmrazor.teacher import load_pretrained

log = logging.getLogger(__name__)


def _subnet(fix_subnet: Any) -> dict[str, Any]:
    if isinstance(fix_subnet, Mapping):
        return plain_choices(fix_subnet)
    if isinstance(fix_subnet, (str, os.PathLike)):
        path = Path(fix_subnet).expanduser()
        if not path.is_file():
            raise ConfigError(f"fix_subnet={str(fix_subnet)!r} does not exist (relative paths are read from "
                              f"{Path.cwd()}); pass fix_subnet= the path of your subnet .yaml/.json file, or the "
                              "subnet dict (e.g. SearchResult.best_subnet).")
        return plain_choices(read_subnet(path))
    raise ConfigError(f"fix_subnet must be a subnet file path or a dict name -> choice, got "
                      f"{type(fix_subnet).__name__}.")


def _export(supernet: nn.Module, subnet: dict[str, Any], prefix: str, extra_prefix: str) -> nn.Module:
    choices = {prefix + k[len(extra_prefix):]: v for k, v in subnet.items() if k.startswith(extra_prefix)}
    mutator = NasMutator(supernet)
    known = set(mutator.mutables) | {getattr(m, "alias", None) for m in mutator.mutables.values()}
    ignored = sorted(set(choices) - known)
    if ignored:  # as MMRazor: the supernet's mutables are looked up in the file; every one must still be there
        log.warning("sub_model: %d subnet entries name no mutable of this supernet and are ignored: %s",
                    len(ignored), ", ".join(ignored))
    mutator.set_choices({k: v for k, v in choices.items() if k not in ignored})
    return export_subnet(supernet)


def sub_model(cfg: nn.Module | Mapping[str, Any] | None = None, fix_subnet: Any = None, mode: str = "mutable",
              prefix: str = "", extra_prefix: str = "", init_weight_from_supernet: bool = False,
              init_cfg: Mapping[str, Any] | None = None, architecture: nn.Module | Mapping[str, Any] | None = None,
              mutator: Any = None, dummy_input: Any = None, **kwargs: Any) -> nn.Module:
    """The subnet ``fix_subnet`` of the supernet, exported as a plain module.

    The supernet is ``architecture`` when it is a module (what ``build(cfg.model, architecture=...)`` passes),
    else ``cfg`` (a module or a buildable config). ``fix_subnet``: a .yaml/.json file (``{name: {chosen: ...}}``)
    or a dict; entries naming no mutable of the supernet are ignored with a logged warning (as MMRazor, which looks
    each mutable up in the file: every mutable must still have its entry).
    Subnet keys are matched to the supernet's mutables as ``prefix + key`` after removing
    ``extra_prefix`` from the key (keys without it are skipped), as MMRazor does. ``mode="mutable"`` only.
    ``init_cfg=dict(type='Pretrained', checkpoint=<.safetensors>, prefix=...)`` loads weights into the subnet
    afterwards; other checkpoints (URLs, ``.pth``) are not read, and the subnet keeps the supernet's weights
    (``init_weight_from_supernet`` is accepted for MMRazor's configs: the weights always come from there first).
    ``mutator`` is accepted and unused (the supernet's mutables are found directly).

    ``mode="mutator"`` (channel pruning: DCFF's and DMCP's subnet configs): ``fix_subnet`` is a channel mutator's
    dump (``{type, channel_unit_cfg: {units: {name: {choice}}}, parse_cfg}``) and the architecture is shrunk
    physically to those widths (first channels kept; ``dummy_input`` traces it). Other keys (the algorithm's, which
    MMRazor's subnet configs carry along) are accepted and unused.
    """
    if mode not in ("mutable", "mutator"):
        raise ConfigError(f"sub_model mode={mode!r} is not supported: 'mutable' (NAS subnets) or 'mutator' (channel "
                          "pruning structures).")
    if fix_subnet is None:
        raise ConfigError("sub_model needs fix_subnet= (a subnet .yaml/.json file or dict).")
    source = architecture if isinstance(architecture, nn.Module) else cfg if cfg is not None else architecture
    if source is None:
        raise ConfigError("sub_model needs the supernet: build(cfg.model, architecture=your_supernet).")
    if mode == "mutator":
        dump = read_structure(fix_subnet, "sub_model") if isinstance(fix_subnet, (str, os.PathLike)) else fix_subnet
        if not isinstance(dump, Mapping):
            raise ConfigError(f"sub_model mode='mutator' needs fix_subnet= a channel mutator dump (dict or .json), "
                              f"got {type(dump).__name__}.")
        structure, parse_cfg = mutator_structure(dump)
        model = shrink_to_structure(unwrap(build_module(source, "architecture")), structure, 1, parse_cfg,
                                    dummy_input)
    else:
        model = _export(unwrap(build_module(source, "architecture")), _subnet(fix_subnet), prefix, extra_prefix)
    if init_cfg:
        load_pretrained(model, init_cfg)
    return model


register_component(sub_model, "model", "sub_model")
