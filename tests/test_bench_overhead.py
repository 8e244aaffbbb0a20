"""The overhead benchmark's bookkeeping: which clients its floor trains, its JSON line and ratios
(no timing is asserted; the benchmark itself is `python -m simulations.bench.overhead`)."""

import json

from simulations.bench.overhead import SETTINGS, floor_plan, local_steps, row, split


def test_floor_trains_the_clients_the_strategy_samples(small_config):
    every = floor_plan({**small_config, "strategy": "fedavg", "num-server-rounds": 3}, 3)
    assert every == [[0, 1, 2, 3]] * 3
    cfg = {**small_config, "strategy": "fedavg", "num-clients": 8, "unseen-fraction": 0.25, "fraction-train": 0.5}
    plan = floor_plan(cfg, 4)
    from fedapp.runtime.registry import parse_run_config
    from fedapp.core.experiment import unseen_clients

    unseen = unseen_clients(parse_run_config(cfg))
    assert len(unseen) == 2 and len(plan) == 4
    for pids in plan:  # 3 of the 6 seen clients, never a new one
        assert len(pids) == 3 == len(set(pids)) and pids == sorted(pids) and not unseen & set(pids)
    assert len({tuple(p) for p in plan}) > 1  # a fresh sample each round
    assert floor_plan(cfg, 4) == plan  # seeded


def test_split_deals_clients_like_the_worker_pool():
    assert split([3, 5, 7, 9, 11], 2) == [[3, 7, 11], [5, 9]]
    assert split([3, 5], 1) == [[3, 5]]


def test_local_steps_of_pefll_are_k():
    assert local_steps(SETTINGS["pefll"]) == 50 and local_steps(SETTINGS["fedavg"]) == 50
    assert local_steps({**SETTINGS["pefll"], "pefll.k": 7}) == 7


def test_json_line_has_the_medians_and_their_ratios_to_the_floor():
    run = {"train": [9.0, 3.0, 4.0, 5.0], "cpu": [1.0] * 4, "to-first-round": 12.5, "in-rounds": 21.0,
           "wall": 40.0, "worker-nice": [0]}
    out = row("fedavg", {**SETTINGS["fedavg"], "num-server-rounds": 4}, 2.0, "2p", {"2p": [2.0], "2t": [3.0]},
              {"2p": [2.0], "2t": [3.0]}, {"1x2": [3.0, 3.0, 3.0], "2x1": [2.0, 2.2, 2.4]}, run)
    line = json.loads(json.dumps(out))
    assert {"strategy", "floor_round_s", "inprocess_round_s", "flwr_run_round_s", "startup_s", "load"} <= set(line)
    assert line["strategy"] == "fedavg" and line["floor_round_s"] == 2.0
    assert line["flwr_run_round_s"] == 4.0  # median of rounds 2.. (round 1 is each worker's warm-up)
    assert line["inprocess_round_s"] == 2.2 and line["inprocess_layout"] == "2 worker processes x 1 thread"  # faster
    assert line["flwr_run_ratio"] == 2.0 and line["inprocess_ratio"] == 1.1
    assert line["startup_s"] == 12.5 and line["shutdown_s"] == 40.0 - 12.5 - 21.0
    assert line["floor_layout"] == "2 processes x 1 thread" and len(line["load"]) == 3
    assert line["flwr_run_layout"] == "2 Ray workers x 1 thread"  # the in-process engine's faster layout


def test_fedsmoo_floor_steps_are_sam_steps_of_the_client_radius():
    """The FedSMOO floor's step is the SAM gradient of its clients' radius (plain SAM: no duals)."""
    import torch

    from clients.sam import SAM
    from simulations.bench.floor import sam_gradient
    from simulations.bench.overhead import sam_rho

    assert sam_rho(SETTINGS["fedsmoo"]) == 0.1 and sam_rho(SETTINGS["fedavg"]) == 0.0
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    before = [p.detach().clone() for p in model.parameters()]
    SAM().gradient(model, lambda: torch.nn.functional.cross_entropy(model(x), y), 0.1)
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    sam_gradient(model, x, y, 0.1)
    for p, w, g in zip(model.parameters(), before, ref):
        assert torch.allclose(p.grad, g, atol=1e-6) and torch.equal(p.detach(), w)


def test_json_line_without_flwr_run():
    out = row("fedsmoo", {**SETTINGS["fedsmoo"], "num-server-rounds": 3}, 2.0, "2p", {"2p": [2.0], "2t": [5.0]},
              {"2p": [2.0]}, {"2x1": [4.0, 4.2], "1x2": [2.1, 2.1]}, None)
    assert out["inprocess_ratio"] == 1.05 and out["inprocess_layout"] == "1 process x 2 threads"
    assert out["flwr_run_round_s"] is None and out["flwr_run_ratio"] is None and out["startup_s"] is None
    assert out["flwr_run_layout"] is None


def test_quick_measures_fedavg_and_pefll_and_the_full_run_fedsmoo_too(monkeypatch):
    from simulations.bench import overhead

    seen = []
    monkeypatch.setattr(overhead, "measure", lambda strategy, rounds, *args: seen.append((strategy, rounds)) or {})
    monkeypatch.setattr(overhead, "emit", lambda line, out: None)
    overhead.main(["--quick"])
    assert seen == [("fedavg", 5), ("pefll", 6)]  # under 5 minutes on the quiet machine
    seen.clear()
    overhead.main([])
    assert seen == [("fedavg", 10), ("pefll", 12), ("fedsmoo", 8)]
    seen.clear()
    overhead.main(["--quick", "--strategies", "fedsmoo"])
    assert seen == [("fedsmoo", 4)]
