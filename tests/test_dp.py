"""Differential privacy (strategies/privacy.py): Flower's DP wrappers and clipping mods on fedapp's
strategies, their refusals at preflight, and the epsilon of the rounds' rows."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from flwr.app import MessageType
from flwr.supercore.differential_privacy import compute_adaptive_noise_params

from fedapp.runtime import preflight, registry
from fedapp.runtime.client_app import app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.core.records import from_record
from fedapp.runtime.server_app import build_strategy
from strategies import privacy
from strategies.base import FedStrategy
from test_library_examples import plain_app, plain_config  # noqa: F401

MECHANISMS = tuple(privacy.WRAPPERS)
#: 4 synthetic clients, 2 rounds, nothing evaluated: what the clipping and the noise act on
SMALL = {"num-clients": 4, "num-server-rounds": 2, "local-steps": 2, "batch-size": 8, "seed": 3,
         "checkpoint-every": 0, "fraction-evaluate": 0.0, "central-eval": False}


class WireGrid(InProcessGrid):
    """An in-process grid that keeps every training reply as it left its client, with what was sent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.wire: list[tuple[dict, dict]] = []  # (sent arrays, reply arrays)

    def _answer(self, mid, msg, kind, out):
        if kind == "reply" and msg.metadata.message_type == MessageType.TRAIN:
            self.wire.append((from_record(msg.content["arrays"]), from_record(out["arrays"])))
        super()._answer(mid, msg, kind, out)


def norm(update: dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float((v.double() ** 2).sum()) for v in update.values()))


def delta(new: dict, old: dict) -> dict[str, torch.Tensor]:
    return {k: new[k].double() - old[k].double() for k in old if old[k].is_floating_point()}


def dp_run(monkeypatch, strategy: str, dp: str, z: float, clip: float, **kw):
    """A run under ``dp``; returns (strategy, wire replies, per round: (model sent, the clipped
    updates the strategy averaged, their mean before the noise))."""
    rc = {**SMALL, "strategy": strategy, "dp": dp, "dp-noise-multiplier": z, "dp-clipping-norm": clip, **kw}
    rounds: list[tuple[dict, list[dict], dict]] = []
    aggregate = FedStrategy.aggregate

    def spy(self, server_round, replies):
        sent = {k: v.clone() for k, v in self.global_state.items()}
        updates = [delta(r.payload["arrays"], self.driver.wire.sent[r.pid]["arrays"]) for r in replies]
        aggregate(self, server_round, replies)
        rounds.append((sent, updates, {k: v.clone() for k, v in self.global_state.items()}))

    monkeypatch.setattr(FedStrategy, "aggregate", spy)
    cfg = preflight.check(rc)
    s = build_strategy(cfg)
    grid = WireGrid(app, cfg.num_clients, rc)
    s.start(grid)
    return s, grid.wire, rounds


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("name", privacy.ACCEPTS)
def test_dp_clips_every_record(name, mechanism, monkeypatch):
    """Without noise (z = 0) every update a strategy averages is clipped to the round's norm C, the
    new model is their uniform mean, and client-side clipping (Flower's mod in fedapp's ClientApp)
    clips at the client exactly what the server-side wrapper clips on the server. With noise, the
    model is that mean plus Gaussian noise of std z' C' / n (Flower's compute_stdv)."""
    clip = 1e-3  # the synthetic MLP's updates after 2 steps are longer (Per-FedAvg's 0.004): every one is clipped
    s, wire, rounds = dp_run(monkeypatch, name, mechanism, 0.0, clip)
    norms = [r["dp-clipping-norm"] for r in s.history[1:]]
    assert len(rounds) == 2 and norms[0] == clip
    wire_norms = [norm(delta(reply, sent)) for sent, reply in wire]
    for (sent, updates, mean), c in zip(rounds, norms):
        assert len(updates) == 4
        for u in updates:  # clipped to C (float32 rounding), and C is below every raw update
            assert norm(u) == pytest.approx(c, rel=1e-5)
        uniform = {k: sum(u[k] for u in updates) / len(updates) for k in updates[0]}
        for k, v in uniform.items():
            torch.testing.assert_close(mean[k].double() - sent[k].double(), v, rtol=0, atol=1e-7)
    if mechanism.startswith("server"):  # clipped on the server, not before
        assert min(wire_norms) > 2 * clip
    else:  # clipped before it left the client
        assert max(wire_norms) <= max(norms) * (1 + 1e-5)
    if mechanism.startswith("client") and name == "fedavg":
        twin = dp_run(monkeypatch, name, mechanism.replace("client", "server"), 0.0, clip)[2]
        for (_, got, _), (_, want, _) in zip(rounds, twin):
            for g, w in zip(got, want):
                for k in w:
                    torch.testing.assert_close(g[k], w[k], rtol=0, atol=1e-7)
    # the next round starts from the mean itself: z = 0 adds no noise
    assert all(torch.equal(rounds[1][0][k], rounds[0][2][k]) for k in rounds[0][2])
    if name != "fedavg":
        return
    z = 1.0
    s, _, rounds = dp_run(monkeypatch, name, mechanism, z, clip, **{"dp-clipped-count-stddev": 1.0})
    noise = torch.cat([(rounds[1][0][k].double() - rounds[0][2][k].double()).flatten() for k in rounds[0][2]])
    dp = s.dp_wrapper
    # the wrapper's noise multiplier (adaptive: z less the count's share) times the norm it held when
    # it noised (adaptive: already the next round's)
    c_noise = s.history[1].get("dp-clipping-norm-next", clip)
    z_model = compute_adaptive_noise_params(z, 4, 1.0)[1] if mechanism.endswith("adaptive") else z
    assert dp.noise_multiplier == z_model
    assert float(noise.std()) == pytest.approx(z_model * c_noise / 4, rel=0.05)
    assert abs(float(noise.mean())) < 4 * z_model * c_noise / 4 / math.sqrt(noise.numel())


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("name", sorted(privacy.REFUSALS))
def test_dp_refused_where_unsound(name):
    """A strategy whose replies carry more than the model, or whose server state is not their plain
    mean, refuses dp at preflight in one line saying why, before any data is read."""
    with pytest.raises(ConfigError) as err:
        preflight.check({"strategy": name, "dp": "client-fixed", "num-clients": 4, "data-dir": "/nonexistent"})
    assert one_line(err) == (f"run config 'dp' = 'client-fixed' is invalid for strategy '{name}': "
                             f"{privacy.REFUSALS[name]}; allowed is 'none'")


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("name", ["scaffold", "fedsmoo"])
def test_dp_refuses_every_mechanism_for_extra_records(name, mechanism):
    """SCAFFOLD's control-delta and FedSMOO's perturbation would be clipped as models or not at all:
    every mechanism is refused for them."""
    with pytest.raises(ConfigError, match=f"'dp' = '{mechanism}' is invalid for strategy '{name}': its replies "
                                          "carry"):
        preflight.check({"strategy": name, "dp": mechanism, "num-clients": 4})


def test_every_strategy_decided():
    """Every registered strategy (fedapp's and flwr:<Name>) either accepts dp or refuses it with a reason."""
    names = set(registry.algorithms())
    assert names == set(privacy.ACCEPTS) | set(privacy.REFUSALS)
    assert not set(privacy.ACCEPTS) & set(privacy.REFUSALS)


def test_dp_refusals_of_settings():
    """A robust aggregation with dp, and adaptive clipping whose count noise cannot take its share of
    z, are refused in one line naming the key."""
    base = {**SMALL, "strategy": "fedavg"}
    with pytest.raises(ConfigError) as err:
        preflight.check({**base, "dp": "server-fixed", "aggregation": "median"})
    assert one_line(err).startswith("run config 'aggregation' = 'median' is invalid with 'dp' = 'server-fixed'")
    with pytest.raises(ConfigError) as err:
        preflight.check({**base, "dp": "client-adaptive", "dp-noise-multiplier": 1.0})
    assert one_line(err).startswith("run config 'dp-clipped-count-stddev' = 0.0 is invalid with "
                                    "'dp-noise-multiplier' = 1.0")
    assert "n / 20 = 0.2, n = 4 clients" in str(err.value)
    with pytest.raises(ConfigError, match="run config 'dp' = 'laplace' is invalid: allowed is one of"):
        parse_run_config({"dp": "laplace"})
    preflight.check({**base, "dp": "client-adaptive", "dp-noise-multiplier": 1.0, "dp-clipped-count-stddev": 0.6})


def accountant_epsilon(multipliers, delta):
    acc = RdpAccountant()
    for z in multipliers:
        acc.compose(dp_event.GaussianDpEvent(z))
    return acc.get_epsilon(delta)


def test_dp_epsilon_is_the_accountants(tmp_path):
    """rounds.csv carries dp-epsilon, each round's value the RDP accountant's for that many Gaussian
    releases at the run's z (fixed clipping, every sampled client valid) and delta, growing each round."""
    rc = {**SMALL, "strategy": "fedavg", "dp": "server-fixed", "dp-noise-multiplier": 1.3, "dp-clipping-norm": 0.1,
          "dp-delta": 1e-4, "num-server-rounds": 3, "fraction-train": 0.5, "results-dir": str(tmp_path), "run-name": "r"}
    s = run_local(rc)
    eps = [r["dp-epsilon"] for r in s.history[1:]]
    assert eps == pytest.approx([accountant_epsilon([1.3 * 2 / 2] * t, 1e-4) for t in (1, 2, 3)], rel=1e-12)
    assert eps[0] < eps[1] < eps[2]
    header, *rows = (tmp_path / "r" / "rounds.csv").read_text().splitlines()
    col = header.split(",").index("dp-epsilon")
    assert [float(r.split(",")[col]) for r in rows[1:]] == pytest.approx(eps, rel=1e-12)


def test_dp_adaptive_epsilon_counts_what_was_added(monkeypatch):
    """Adaptive clipping: each round's release multiplier is the model noise Flower added (z' C_next / n,
    the norm already updated) against the norm the round clipped to, composed with the clipped count's
    noise (sensitivity 1); epsilon is the accountant's over those."""
    s, _, _ = dp_run(monkeypatch, "fedavg", "server-adaptive", 0.8, 0.05, **{"num-server-rounds": 3,
                                                                                "dp-clipped-count-stddev": 1.0})
    sigma, z_model = compute_adaptive_noise_params(0.8, 4, 1.0)
    want = []
    for r in s.history[1:]:
        z = z_model * r["dp-clipping-norm-next"] / r["dp-clipping-norm"]
        want.append((z**-2 + sigma**-2) ** -0.5)
        assert r["dp-release-multiplier"] == pytest.approx(want[-1], rel=1e-12)
        assert r["dp-epsilon"] == pytest.approx(accountant_epsilon(want, 1e-5), rel=1e-12)
    assert not np.allclose(want, 0.8)  # not the z asked for: what was added


def test_no_dp_run_untouched(monkeypatch):
    """Without dp no wrapper is built and the ClientApp's dp mod passes every message through: the
    rows carry no dp column."""
    rc = {**SMALL, "strategy": "fedavg"}
    s = build_strategy(parse_run_config(rc))
    s.start(InProcessGrid(app, 4, rc))
    assert not hasattr(s, "dp_wrapper")
    assert not any(k.startswith("dp-") for r in s.history for k in r)


def test_dp_resumed_run_continues_the_count(tmp_path, monkeypatch):
    """A dp run resumed from its checkpoint continues epsilon from its checkpointed rows, and an
    adaptive one its clipping norm: round 3 after a resume spends what round 3 of one run does."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    base = {**SMALL, "strategy": "fedavg", "dp": "client-adaptive", "dp-noise-multiplier": 0.5,
            "dp-clipped-count-stddev": 1.0, "dp-clipping-norm": 0.05, "results-dir": str(tmp_path), "run-name": "r",
            "checkpoint-every": 1}
    first = run_local(base)
    resumed = run_local({**base, "num-server-rounds": 3, "resume-from": str(tmp_path / "r")})
    rows = resumed.history[1:]
    assert [r["round"] for r in rows] == [1, 2, 3] and rows[:2] == first.history[1:]
    assert rows[2]["dp-clipping-norm"] == rows[1]["dp-clipping-norm-next"]
    assert rows[2]["dp-epsilon"] == pytest.approx(
        accountant_epsilon([r["dp-release-multiplier"] for r in rows], 1e-5), rel=1e-12)
    assert rows[0]["dp-epsilon"] < rows[1]["dp-epsilon"] < rows[2]["dp-epsilon"]


def test_dp_client_side_drops_plain_flower_clients(tmp_path, plain_app):
    """A plain Flower ClientApp applies no clipping mod: under client-side dp its replies are dropped
    as unclipped, never averaged (here every client is one, so the run stops saying so)."""
    with pytest.raises(RuntimeError, match="no valid training reply in its first round.*unclipped: 2"):
        run_local(plain_config(tmp_path, dp="client-fixed"), client_app=plain_app)


def test_dp_clips_replies_that_went_to_disk(monkeypatch):
    """With reply-memory-mb 0 every reply goes to disk as it arrives; under dp it is read back and
    clipped as one held in memory: the same clipped updates and model."""
    held = dp_run(monkeypatch, "fedavg", "server-fixed", 0.0, 1e-3)[2]
    spilled = dp_run(monkeypatch, "fedavg", "server-fixed", 0.0, 1e-3, **{"reply-memory-mb": 0.0})[2]
    for (_, got, mean), (_, want, want_mean) in zip(spilled, held):
        assert len(got) == 4 and all(norm(u) == pytest.approx(1e-3, rel=1e-5) for u in got)
        assert all(torch.equal(mean[k], want_mean[k]) for k in want_mean)


def test_dp_target_epsilon_solves_the_noise(caplog):
    """``dp-target-epsilon``: the server solves z for the planned rounds (a target whose noise leaves this
    tiny model training: under much more, a client's ReLUs can all die and its update be exactly 0, on
    which Flower's server-side clipping divides by zero); a run whose every round releases with z spends the target to the accountant's precision (and no more), its rows carry that
    z, and the setting is refused without ``dp`` or beside a multiplier of one's own."""
    rc = {**SMALL, "strategy": "fedavg", "dp": "server-fixed", "dp-target-epsilon": 50.0, "num-server-rounds": 3}
    with caplog.at_level("INFO", logger="flwr"):
        run = run_local(rc)
    z = privacy.noise_for_target(50.0, 1e-5, 3)
    assert [r["dp-release-multiplier"] for r in run.history[1:]] == pytest.approx([z] * 3)
    assert 50.0 - 1e-3 < run.history[-1]["dp-epsilon"] <= 50.0
    assert privacy.epsilon([z * 0.999] * 3, 1e-5) > 50.0  # the smallest noise that keeps to the target
    assert f"noise multiplier {z:.4f} spends epsilon 50" in caplog.text
    assert re.search(r"round 3/3 \|.* dp-epsilon (49\.99|50\.00)", caplog.text)  # the progress line
    for extra, needle in (({"dp": "none"}, "needs 'dp'"), ({"dp-noise-multiplier": 2.0}, "both set the noise")):
        with pytest.raises(ConfigError, match=needle):
            preflight.check({**rc, **extra})


@pytest.mark.parametrize("mechanism", ["server-fixed", "server-adaptive"])
def test_an_update_of_norm_zero_passes_the_clipping(mechanism, monkeypatch):
    """A reply equal to the model it was sent (here: a sign-flip fault whose factor is 0) has an update
    of norm 0, on which Flower's FlatClip divides by zero; clipped, it is itself: the run goes on with
    every reply averaged, and the clipping arithmetic is Flower's for every other update."""
    from flwr.supercore import differential_privacy as flower_dp

    from fedapp.core.compat import zero_norm_clipping
    from fedapp.runtime import faults

    monkeypatch.setitem(faults.FACTORS, "sign-flip", 0.0)
    run = run_local({**SMALL, "strategy": "fedavg", "dp": mechanism, "dp-noise-multiplier": 0.0,
                     "fault-fraction": 0.25, "fault-kind": "sign-flip"})
    assert [r["replies"] for r in run.history[1:]] == [4, 4]
    assert all(torch.isfinite(v).all() for v in run.global_state.values())
    zero_norm_clipping()
    zero = [np.zeros(3, np.float32)]
    assert flower_dp.clip_inputs_inplace(zero, 1.0) is False and not zero[0].any()
    long, short = [np.full(4, 1.0, np.float32)], [np.full(4, 0.1, np.float32)]
    assert flower_dp.adaptive_clip_inputs_inplace(long, 1.0) is True and np.allclose(long[0], 0.5)
    assert flower_dp.adaptive_clip_inputs_inplace(short, 1.0) is False and np.allclose(short[0], 0.1)
