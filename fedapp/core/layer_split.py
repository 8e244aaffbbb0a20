"""FedALS's split of a model into a body phi (the first L layer groups) and a head h: the client
trains and sends the parts, the server averages them, so both take the split from here; and the
check of the split the personal-head algorithms (FedRep, HCCT-P) need."""

from __future__ import annotations

import torch

from fedapp.core.config import ConfigError
from fedapp.core.models import body_head_keys, declared_head, is_builtin, layer_groups, split_declared


def fedals_layer_groups(model: torch.nn.Module, grouping: str = "layers") -> list[list[str]]:
    """Layer groups that ``fedals.body-layers`` counts. "layers": every Conv/Linear is a layer
    (ResNet-20: 22 = 19 convs + 2 shortcut convs + fc). "authors": as the authors' code groups its
    ResNet-20 (a group opens at each state key naming a "conv" or "fc.weight"), a shortcut conv and its
    norm join the group of the block's second conv, so ResNet-20 has 20 layers as in the paper."""
    groups = layer_groups(model)
    if grouping == "authors":
        merged: list[list[str]] = []
        for g in groups:
            if merged and ".shortcut." in f".{g[0]}":
                merged[-1] = merged[-1] + g
            else:
                merged.append(g)
        groups = merged
    return groups


def split_model(model: torch.nn.Module, body_layers: int, grouping: str) -> tuple[list[str], list[str]]:
    """(body, head) state_dict keys of ``split_layers``; a tensor the head shares with the body (tied
    weights: OPT's token embedding is its ``lm_head``) is the head's alone, so it is averaged and sent
    once a round, with the head, and the model loading the head gets it in both places."""
    body, head = split_layers(model, body_layers, grouping)
    tensors = model.state_dict(keep_vars=True)
    shared = {id(tensors[k]) for k in head}
    return [k for k in body if id(tensors[k]) not in shared], head


def split_layers(model: torch.nn.Module, body_layers: int, grouping: str) -> tuple[list[str], list[str]]:
    """(body, head) state_dict keys: the first ``body_layers`` (``fedals.body-layers``) groups of
    ``grouping`` (``fedals.layer-groups``) are the body. 0 is the paper's default (Table 4): the body
    is the convolutional layers and the head the final dense layers (LeNet: conv1, conv2 | fc1, fc2,
    fc; ResNet-20: all convs | fc); for a model without convolutions, all layers but the last. A model
    that declares its head (``fedapp.core.models.declared_head``) is split there with 0; a user's model that
    declares none needs a head declaration or ``body-layers``."""
    groups = fedals_layer_groups(model, grouping)
    n, L = len(groups), body_layers
    if L == 0 and (head := declared_head(model)) is not None:
        return split_declared(model, head)
    if L == 0 and not is_builtin(model):
        raise ValueError(f"{type(model).__name__} declares no head: set run config 'head-modules' (or give the model a "
                         "`head` attribute naming its head modules), or 'fedals.body-layers'")
    if L == 0:
        convs = 0
        for g in groups:
            if isinstance(model.get_submodule(g[0].rpartition(".")[0]), torch.nn.Linear):
                break
            convs += 1
        L = convs or n - 1
    if not 1 <= L < n:
        raise ValueError(f"body-layers must be 0 or in [1, {n - 1}] (this model has {n} layer groups), got {L}")
    return [k for g in groups[:L] for k in g], [k for g in groups[L:] for k in g]


def check_head(cfg, model: nn.Module) -> None:
    """The body/head split an algorithm with a personal head needs (FedRep, HCCT-P): a ConfigError
    naming ``head-modules`` when the model declares none (a user's model) or a wrong one."""
    try:
        body_head_keys(model)
    except ValueError as err:
        raise ConfigError(f"run config 'head-modules' = {cfg.head_modules!r} is invalid for {cfg.strategy}: "
                          f"{err}") from None
