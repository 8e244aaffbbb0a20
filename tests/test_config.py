"""Run-config validation: every bad value stops the run with a message naming the key."""

import tomllib

import pytest

from fedapp.core.config import COMMON_KEYS, ConfigError
from fedapp.runtime.appdir import flat
from fedapp.runtime.registry import defaults, parse_run_config
from tests.conftest import ROOT


def test_defaults_parse_and_match_pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["tool"]["flwr"]["app"]["config"]

    assert flat(declared) == defaults()
    cfg = parse_run_config(flat(declared))
    assert cfg.strategy == "fedavg" and cfg.num_clients == 2 and cfg.local_steps == 0


@pytest.mark.parametrize("key,value,needle", [
    ("strategy", "fedfoo", "'strategy' = 'fedfoo'"),
    ("dataset", "imagenet", "'dataset'"),
    ("model", "vgg", "'model'"),
    ("partition", "weird", "'partition'"),
    ("fraction-train", 0.0, "'fraction-train'"),
    ("fraction-train", 1.5, "(0.0, 1.0]"),
    ("lr", -0.1, "'lr'"),
    ("num-server-rounds", 0, "'num-server-rounds'"),
    ("batch-size", 2.5, "'batch-size'"),
    ("central-eval", "yes", "'central-eval'"),
])
def test_bad_values_name_key_and_allowed(key, value, needle):
    with pytest.raises(ConfigError) as err:
        parse_run_config({key: value})
    assert needle in str(err.value)
    assert "allowed is" in str(err.value)


def test_unknown_choice_lists_allowed_values():
    with pytest.raises(ConfigError, match="'fedavg'"):
        parse_run_config({"strategy": "nope"})
    with pytest.raises(ConfigError, match="'lenet'"):
        parse_run_config({"model": "nope"})


def test_unknown_key_and_inconsistent_pairs():
    with pytest.raises(ConfigError, match="unknown run config key.*'num-round'"):
        parse_run_config({"num-round": 3})
    with pytest.raises(ConfigError, match="'partition' = 'natural'"):
        parse_run_config({"dataset": "cifar10", "partition": "natural"})
    with pytest.raises(ConfigError, match="min-train-nodes"):
        parse_run_config({"num-clients": 2, "min-train-nodes": 3})


def test_types_are_coerced():
    cfg = parse_run_config({"lr": 1, "num-clients": 4.0, "central-eval": "false"})
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.num_clients == 4 and isinstance(cfg.num_clients, int)
    assert cfg.central_eval is False
    assert {k.name for k in COMMON_KEYS} <= set(cfg.as_dict())


def test_algorithm_key_errors_name_the_prefixed_key():
    with pytest.raises(ConfigError, match="'fedals.alpha' = 0 is invalid"):
        parse_run_config({"strategy": "fedals", "fedals.alpha": 0})


def test_client_side_parse_equals_server_side():
    """A ClientApp's parse (``side="client"``: the declarations in clients/, no strategy imported)
    gives, for every algorithm, the server's value of every key a client reads (the common keys and
    every algorithm's client keys) and the same one-line error for a bad one. A key under an
    algorithm's prefix that no client reads (a server setting) passes the client as given, unchecked:
    the server checked the same run config before it sent anything."""
    from fedapp.runtime import registry

    read = registry.client_side_keys()
    for name, spec in registry.algorithms().items():
        own = {f"{spec.prefix}.{k.name}": k.default for k in spec.keys}
        raw = {"strategy": name, "seed": 3, **own, **({f"{spec.prefix}.lr-decay": 0.5} if any(
            k.name == "lr-decay" for k in spec.keys) else {})}
        client, server = parse_run_config(raw, side="client"), parse_run_config(raw)
        assert client.prefix == server.prefix == spec.prefix
        assert {k: client[k] for k in read} == {k: server[k] for k in read}, name
        assert {f"{spec.prefix}.{k}" for k in spec.strategy.client_keys} <= set(read), name
        server_only = {k: v for k, v in raw.items() if k not in read}
        assert client.as_dict() == {**{k: server[k] for k in read}, **server_only}, name
        assert registry.client(name) is spec.client
    assert len(read) < len(registry.all_keys())  # the clients do not read every key
    # a server setting passes the client unchecked: an int stays an int, a value the server refuses stays
    raw = {"strategy": "pefll", "pefll.server-lr": 1, "pefll.k": "many"}
    assert {k: parse_run_config(raw, side="client")[k] for k in raw} == raw
    with pytest.raises(ConfigError, match="'pefll.k' = 'many' is invalid"):
        parse_run_config(raw)
    for bad, needle in (({"strategy": "fedals", "fedals.body-layers": -1}, "'fedals.body-layers' = -1 is invalid"),
                        ({"strategy": "fedsam", "fedsam.rho": -0.1}, "'fedsam.rho' = -0.1 is invalid"),
                        ({"strategy": "fedsmoo", "fedsam.rho": "x"}, "'fedsam.rho' = 'x' is invalid"),
                        ({"strategy": "nope"}, "'strategy'"),
                        ({"num-round": 3}, "unknown run config key.*'num-round': did you mean 'num-server-rounds'")):
        errors = []
        for side in ("client", "server"):
            with pytest.raises(ConfigError, match=needle) as err:
                parse_run_config(bad, side=side)
            errors.append(str(err.value))
        assert errors[0] == errors[1] and "\n" not in errors[0]
    # a misspelt prefix is refused on both sides (the client's hint names only keys it knows)
    for side in ("client", "server"):
        with pytest.raises(ConfigError, match="unknown run config key.*'pefl.k'"):
            parse_run_config({"strategy": "pefll", "pefl.k": 5}, side=side)


def test_cross_key_checks_stay_on_the_server_side():
    """``check_config`` (a strategy's cross-key checks) runs where the strategy is: the server refuses
    PeFLL's clipping without an optimiser to clip; a client leaves that to the server."""
    bad = {"strategy": "pefll", "pefll.server-clip": 50.0}
    with pytest.raises(ConfigError, match="'pefll.server-clip' = 50.0: clipping needs"):
        parse_run_config(bad)
    assert parse_run_config(bad, side="client").algo("server-clip") == 50.0


def test_relative_paths_read_from_app_dir():
    """`flwr run` runs the ServerApp and ClientApps where its SuperLink was started: a relative path of the
    run config is read from ``app-dir`` (on both sides), absolute ones and '' stay as they are."""
    paths = {"data-dir": "data", "results-dir": "/abs/results", "resume-from": "~/run", "state-spill-dir": "",
             "site-keys": "keys/sites.toml"}
    for side in ("server", "client"):
        cfg = parse_run_config({**paths, "app-dir": "/srv/apps/myapp"}, side=side)
        assert (cfg.data_dir, cfg.results_dir, cfg.resume_from, cfg.state_spill_dir, cfg.site_keys) == (
            "/srv/apps/myapp/data", "/abs/results", "~/run", "", "/srv/apps/myapp/keys/sites.toml")
    cfg = parse_run_config(paths)  # no app-dir: as given, read from the working directory
    assert (cfg.data_dir, cfg.site_keys) == ("data", "keys/sites.toml")
