"""fedapp's strategies as a library: keyword constructors, Flower's Grid and start(), Flower's own
strategies by name (``flwr:<Name>``)."""

import inspect

import pytest
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedapp.runtime import checkpoint, preflight
from fedapp.runtime.client_app import app as client_app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import dataset, model_for
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.core.records import to_record
from fedapp.runtime.registry import algorithms
from strategies.fedavg import FedAvg
from strategies.fedsmoo import FedSMOO

TIMINGS = {"train-seconds", "round-seconds", "wall-time"}

#: settings every strategy accepts on the synthetic data (PeFLL's and pFedHN's small hypernetworks,
#: FedALS's averaging period within the run)
SETTINGS = {"num-clients": 3, "num-server-rounds": 1, "local-steps": 2, "batch-size": 16, "seed": 5,
            "unseen-fraction": 0.34, "checkpoint-every": 0, "pefll.k": 2, "pefll.embed-dim": 3,
            "pefll.descriptor-batch": 8, "pfedhn.k": 2, "pfedhn.embed-dim": 3, "pfedhn.new-client-rounds": 1,
            "fedals.alpha": 1}


def rows(strategy):
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in strategy.history]


def settings(cfg, cls):
    """The common keys and those of ``cls`` (a run config also holds every other strategy's defaults)."""
    return {k: v for k, v in cfg.as_dict().items() if k.partition(".")[0] in (k, cls.config_prefix)}


def as_kwargs(cls, run_config):
    """The run config as keyword arguments of ``cls``: its own keys without their prefix, the common ones."""
    out = {}
    for key, value in run_config.items():
        prefix, dot, name = key.rpartition(".")
        if key != "strategy" and (not dot or prefix == cls.config_prefix):
            out[(name if dot else key).replace("-", "_")] = value
    return out


@pytest.mark.parametrize("name", sorted(algorithms()))
def test_kwargs_built_strategy_equals_run_config_built(name, tmp_path):
    """Every strategy built from keyword arguments and run by its start() on a Grid, as in a user's
    ServerApp, gives the rows and models of the same strategy built from the run config by fedapp's
    ServerApp, at a fixed seed."""
    rc = {**SETTINGS, "strategy": name, "results-dir": str(tmp_path), "run-name": "rc"}
    by_config = run_local(rc)
    cls = algorithms()[name].strategy
    cfg = parse_run_config(rc)
    ds = dataset(cfg)
    strategy = cls(model=model_for(cfg, ds), dataset=ds, **as_kwargs(cls, rc))
    assert settings(strategy.cfg, cls) == settings(by_config.cfg, cls)
    grid = InProcessGrid(client_app, cfg.num_clients, rc)
    try:
        result = strategy.start(grid, num_rounds=1)
    finally:
        grid.close()
    assert rows(strategy) == rows(by_config)
    for k, v in by_config.global_state.items():
        assert torch.equal(strategy.global_state[k], v), k
    if cls.global_model:  # Flower's Result carries the final model
        final = result.arrays.to_torch_state_dict()
        assert list(final) == list(by_config.global_state)
        assert all(torch.equal(final[k], v) for k, v in by_config.global_state.items())


def test_keyword_constructor_reads_as_flower_s(tmp_path):
    cfg = parse_run_config({"strategy": "fedavg", "seed": 2})
    model = model_for(cfg, dataset(cfg))
    s = FedSMOO(model=model, rho=0.2, beta=100.0, fraction_train=0.5, lr_decay=0.99)
    assert (s.cfg.algo("rho"), s.cfg.algo("beta"), s.cfg.fraction_train, s.cfg["fedsmoo.lr-decay"]) == (
        0.2, 100.0, 0.5, 0.99)
    assert s.cfg.strategy == "fedsmoo"
    # a run config naming another strategy is read as naming this one (was KeyError: 'fedavg.rho')
    assert FedSMOO(cfg, model).cfg.algo("rho") == 0.1
    with pytest.raises(ConfigError, match=r"^FedSMOO\(rhoo=...\): no such setting; did you mean rho\?$"):
        FedSMOO(model=model, rhoo=0.2)
    with pytest.raises(ConfigError, match=r"'fedsmoo.rho' = -1.0 is invalid"):
        FedSMOO(model=model, rho=-1.0)
    with pytest.raises(ValueError, match=r"^FedAvg was built without a model, so start\(\) needs initial_arrays"):
        FedAvg(lr=0.1).start(None)
    with pytest.raises(TypeError, match=r"^FedAvg\(dataset=...\) is the test set .*: pass model= with it$"):
        FedAvg(dataset=dataset(cfg))
    assert "Parameters\n----------" in FedSMOO.__doc__ and "rho : float (default: 0.1)" in FedSMOO.__doc__


def test_start_takes_flowers_initial_arrays(tmp_path, small_config):
    """``start(grid, initial_arrays, num_rounds)`` as Flower's FedAvg: the arrays replace the model's
    initial state, and zero-trained rounds (lr-decay aside) keep them."""
    cfg = parse_run_config(small_config)
    model = model_for(cfg)
    init = {k: torch.full_like(v, 0.01) for k, v in model.state_dict().items()}
    a = FedAvg(model=model, **as_kwargs(FedAvg, small_config))
    b = FedAvg(model=model_for(cfg), **as_kwargs(FedAvg, small_config))
    b.global_state = {k: v.clone() for k, v in init.items()}
    for s, arrays in ((a, to_record(init)), (b, None)):
        grid = InProcessGrid(client_app, cfg.num_clients, small_config)
        s.start(grid, initial_arrays=arrays, num_rounds=1)
        grid.close()
    for k in init:
        assert torch.equal(a.global_state[k], b.global_state[k]), k


def test_flower_fedavg_by_name_is_fedapps_fedavg(small_config):
    """Flower's FedAvg driving fedapp's clients: the model of fedapp's FedAvg, the same rows' keys."""
    ours = run_local({**small_config, "strategy": "fedavg"})
    flower = run_local({**small_config, "strategy": "flwr:FedAvg", "run-name": "f"})
    for k, v in ours.global_state.items():
        assert torch.allclose(flower.global_state[k], v, atol=1e-6), k
    assert ours.history[-1].keys() == flower.history[-1].keys()
    assert flower.history[-1]["fed-accuracy"] == pytest.approx(ours.history[-1]["fed-accuracy"], abs=1e-6)


def test_flower_fedprox_sends_its_proximal_mu_to_fedapps_client(small_config):
    """Flower's FedProx puts ``proximal-mu`` in its configure_train's config; fedapp's FedProx client
    reads it there: the model of fedapp's FedProx with the same mu."""
    ours = run_local({**small_config, "strategy": "fedprox", "fedprox.proximal-mu": 0.5})
    flower = run_local({**small_config, "strategy": "flwr:FedProx", "flwr-fedprox.proximal-mu": 0.5,
                        "run-name": "f"})
    assert flower.flower_config == {"proximal-mu": 0.5}
    for k, v in ours.global_state.items():
        assert torch.allclose(flower.global_state[k], v, atol=1e-6), k


def test_flower_strategy_resumes_from_its_checkpoint(small_config, tmp_path):
    """FedAdam's moments live in Flower's strategy object; the checkpoint carries them, so a run
    resumed after round 1 ends where the uninterrupted run ends."""
    rc = {**small_config, "strategy": "flwr:FedAdam", "num-server-rounds": 2, "flwr-fedadam.eta": 0.05}
    whole = run_local({**rc, "run-name": "whole"})
    run_local({**rc, "num-server-rounds": 1, "run-name": "first", "keep-client-state": True})
    saved = checkpoint.load(tmp_path / "results" / "first")
    assert set(saved["attrs"]["flower_state"]) == {"current_arrays", "m_t", "v_t"}
    resumed = run_local({**rc, "run-name": "first", "resume-from": str(tmp_path / "results" / "first")})
    for k, v in whole.global_state.items():
        assert torch.equal(resumed.global_state[k], v), k
    assert rows(resumed)[-1] == rows(whole)[-1]


def test_flower_strategy_refuses_fedapps_robust_aggregation(small_config):
    with pytest.raises(ConfigError, match=r"^run config 'aggregation' = 'median' is invalid for strategy 'flwr:FedAvg': "
                                          "a Flower strategy aggregates as Flower does it"):
        preflight.check({**small_config, "strategy": "flwr:FedAvg", "aggregation": "median"})


def start_on_grid(strategy, run_config, client=client_app, nodes=2, **start):
    """``strategy.start`` on an in-process grid of ``nodes`` nodes running ``client``."""
    grid = InProcessGrid(client, nodes, run_config)
    try:
        return strategy.start(grid, num_rounds=1, **start)
    finally:
        grid.close()


def test_strategies_construct_like_flowers(tmp_path):
    """The papers' names from ``strategies``, built as Flower's strategies are (keyword arguments, no
    model) and started on a grid with ``initial_arrays``: each trains those arrays, to the model the
    same strategy built from its run config and that module gives; their signatures are Flower's base
    keys, then the algorithm's own under the paper's names."""
    from strategies import SCAFFOLD, FedProx, FedSMOO, Scaffold

    assert SCAFFOLD is Scaffold and SCAFFOLD.__name__ == "SCAFFOLD"
    for strategy, name, own in ((FedProx(proximal_mu=0.1), "fedprox", {"proximal-mu": 0.1}),
                                (SCAFFOLD(), "scaffold", {}), (FedSMOO(fraction_train=0.5), "fedsmoo", {})):
        rc = {"strategy": name, "seed": 1, "local-steps": 2, "results-dir": str(tmp_path)}
        cfg = parse_run_config({**rc, **{f"{name}.{k}": v for k, v in own.items()}, "fraction-train":
                                strategy.cfg.fraction_train})
        model = model_for(cfg)
        init = {k: v.clone() for k, v in model.state_dict().items()}
        result = start_on_grid(strategy, rc, initial_arrays=ArrayRecord(init), train_config={"local-steps": 2})
        final = result.arrays.to_torch_state_dict()
        assert list(final) == list(init)
        assert any(not torch.equal(final[k], init[k]) for k in init), name
        reference = type(strategy)(cfg, model)
        start_on_grid(reference, rc)
        for k, v in reference.global_state.items():
            assert torch.equal(final[k], v), (name, k)
    assert FedSMOO(fraction_train=0.5).cfg.fraction_train == 0.5
    flower = ["fraction_train", "fraction_evaluate", "min_train_nodes"]
    prox, smoo = inspect.signature(FedProx).parameters, inspect.signature(FedSMOO).parameters
    assert list(prox)[:4] == [*flower, "proximal_mu"] and "cfg" not in list(prox)[:4]
    assert (prox["proximal_mu"].default, prox["proximal_mu"].annotation) == (0.01, float)
    assert list(smoo)[:5] == [*flower, "rho", "beta"] and smoo["rho"].default == 0.1
    assert list(inspect.signature(SCAFFOLD).parameters)[:4] == [*flower, "server_lr"]
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in prox.values())


def test_user_train_config_wins_or_is_refused(tmp_path):
    """A setting the messages carry, given in ``start``'s train_config, wins over fedapp's default
    (the model of lr=0.01 given as a keyword argument, not the default 0.05's); a key of the user's
    own travels as given; fedapp's message keys and one setting given two values are refused in one
    line naming both."""
    rc = {"strategy": "fedavg", "seed": 1, "local-steps": 2, "results-dir": str(tmp_path)}
    init = ArrayRecord(model_for(parse_run_config(rc)).state_dict())
    given = FedAvg()
    start_on_grid(given, rc, initial_arrays=init, train_config={"lr": 0.01, "local-steps": 2, "my-key": 7})
    assert given.cfg.lr == 0.01 and given.base_config["train"] == {"my-key": 7}
    config = given.driver.contents("train", 1, [0])[0]["config"]
    assert (config["lr"], config["my-key"]) == (0.01, 7)
    keyword, default = FedAvg(lr=0.01, local_steps=2), FedAvg(local_steps=2)
    for s in (keyword, default):
        start_on_grid(s, rc, initial_arrays=init)
    assert all(torch.equal(given.global_state[k], v) for k, v in keyword.global_state.items())
    assert not all(torch.equal(given.global_state[k], v) for k, v in default.global_state.items())
    with pytest.raises(ConfigError, match=r"^train_config\['server-round'\] = 3 clashes with fedapp's 'server-round' "):
        start_on_grid(FedAvg(), rc, initial_arrays=init, train_config={"server-round": 3})
    with pytest.raises(ConfigError, match=r"^train_config\['batch-size'\] = 8 and evaluate_config\['batch-size'\] = 16: "
                                          "FedAvg runs one 'batch-size'; give it once$"):
        start_on_grid(FedAvg(), rc, initial_arrays=init, train_config={"batch-size": 8},
                      evaluate_config={"batch-size": 16})
    with pytest.raises(ConfigError, match=r"'lr' = -1.0 is invalid"):
        start_on_grid(FedAvg(), rc, initial_arrays=init, train_config={"lr": -1.0})


def plain_clientapp() -> ClientApp:
    """A Flower ClientApp with metric names of its own: node i (partition i) trains nothing, reports
    train_loss 1 + i over 10 (i + 1) examples and eval_acc 0.5 + 0.1 i, eval_loss 2 - i."""
    app = ClientApp()

    def metrics(context, **values):
        i = context.node_config["partition-id"]
        return MetricRecord({**{k: v(i) for k, v in values.items()}, "num-examples": 10 * (i + 1)})

    @app.train()
    def train(msg, context):
        content = RecordDict({"arrays": msg.content["arrays"], "metrics": metrics(context, train_loss=lambda i: 1.0 + i)})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg, context):
        m = metrics(context, eval_acc=lambda i: 0.5 + 0.1 * i, eval_loss=lambda i: 2.0 - i)
        return Message(content=RecordDict({"metrics": m}), reply_to=msg)

    return app


def test_user_metric_names_come_back_as_named(tmp_path):
    """Flower's Result holds the clients' metrics under their own names, weighted by num-examples as
    Flower's aggregation does (10 and 20 examples), beside fedapp's pooled fed-* metrics."""
    rc = {"strategy": "fedavg", "seed": 1, "results-dir": str(tmp_path)}
    result = start_on_grid(FedAvg(), rc, client=plain_clientapp(),
                           initial_arrays=ArrayRecord({"w": torch.zeros(3)}))
    evaluated, trained = result.evaluate_metrics_clientapp[1], result.train_metrics_clientapp[1]
    assert evaluated["eval_acc"] == pytest.approx((0.5 * 10 + 0.6 * 20) / 30)
    assert evaluated["eval_loss"] == pytest.approx((2.0 * 10 + 1.0 * 20) / 30)
    assert evaluated["fed-accuracy"] == pytest.approx(evaluated["eval_acc"])
    assert trained["train_loss"] == pytest.approx((1.0 * 10 + 2.0 * 20) / 30)
    assert "accuracy" not in evaluated and "train-loss" in trained
