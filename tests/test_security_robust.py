"""Robust aggregation on every strategy, and the default defence against poisoned replies
(``aggregation`` in strategies/base.py, the defence in strategies/driver.py, attacks in fedapp/faults.py)."""

from __future__ import annotations

import pytest
import torch

from fedapp import checkpoint, preflight, registry
from fedapp.config import ConfigError, parse_run_config
from fedapp.server_app import build_strategy
from test_reliability import EXTRA, config, image_tree, run  # noqa: F401

#: what keeps each strategy's run small and makes it combine something in two rounds
SMALL = {**EXTRA, "pefll": {**EXTRA["pefll"], "num-server-rounds": 2},
         "pfedhn": {"model": "lenet", "dataset": "imagefolder", "partition": "iid", "pfedhn.k": 2,
                    "num-server-rounds": 2},
         "fedals-scaffold": EXTRA["fedals"]}
#: checkpointed state that is no combination of replies: HCCT's last update of each client as it
#: sent it, PeFLL's descriptor standardisation (fixed by the first descriptor)
OWN = ("updates", "v_stats")


def state_tensors(strategy) -> dict[str, list[torch.Tensor]]:
    """Every checkpointed attribute that holds tensors, as its tensors in a fixed order."""
    out = {}
    for name in checkpoint.attrs_of(strategy):
        found: list[torch.Tensor] = []

        def walk(v):
            if isinstance(v, torch.Tensor):
                found.append(v)
            elif isinstance(v, dict):
                for k in sorted(v, key=str):
                    walk(v[k])
            elif isinstance(v, (list, tuple)):
                for x in v:
                    walk(x)
        walk(checkpoint._pack(getattr(strategy, name)))
        if found:
            out[name] = found
    return out


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", sorted(registry.algorithms()))
def test_every_strategy_honours_aggregation(name, config, image_tree):
    """Every state a strategy combines from replies (model, control variates, duals, perturbation,
    Adam moments, cluster, group and body models, hypernetwork and embedding networks) comes out
    of a median run different from the mean run wherever the mean run changed it; a strategy that
    combines nothing refuses the option at preflight in one line. Every such state goes through
    ``FedStrategy.combine``, so the other options (trimmed mean, Krum: tests/test_security.py) reach
    it the same way."""
    small = {**SMALL.get(name, {}), "num-clients": 4, "min-train-nodes": 2}
    if small.get("dataset") == "imagefolder":
        small["data-dir"] = str(image_tree)
    robust = config(name, **small, aggregation="median")
    spec = registry.get(name).strategy
    if spec.robust_refusal:
        with pytest.raises(ConfigError, match=f"'aggregation' = 'median' is invalid for strategy '{name}'"):
            preflight.check(robust)
        preflight.check(config(name, **small))  # the plain mean is fine
        return
    preflight.check(robust)
    mean = state_tensors(run(config(name, **small))[0])
    initial = state_tensors(build_strategy(parse_run_config(config(name, **small))))
    got = state_tensors(run(robust)[0])
    changed = [a for a in mean if a not in OWN and (a not in initial or not same(mean[a], initial[a]))]
    assert changed, "the mean run changed nothing"
    assert [a for a in changed if same(got[a], mean[a])] == []
