"""PeFLL's three-phase protocol checked against one-process autograd, and its messages."""

import numpy as np
import pytest
import torch
from PIL import Image

from clients.pefll import PeFLLClient, descriptor
from fedapp.runtime.client_app import app as client_app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import client_data, dataset, model_for
from fedapp.runtime.inprocess import InProcessGrid, run_local
from strategies.pefll import PeFLL, embed_dim


@pytest.fixture
def image_config(tmp_path, monkeypatch):
    """A 4-class 28x28 grey ImageFolder tree (class = bright quadrant), 6 clients, 2 of them new."""
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    for split, n in (("train", 30), ("test", 5)):
        for c in range(4):
            (tmp_path / "tree" / split / str(c)).mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 80, (28, 28), dtype=np.uint8)
                img[14 * (c // 2):14 * (c // 2) + 14, 14 * (c % 2):14 * (c % 2) + 14] += 150
                Image.fromarray(img).save(tmp_path / "tree" / split / str(c) / f"{i}.png")
    return {
        "strategy": "pefll", "dataset": "imagefolder", "data-dir": str(tmp_path / "tree"), "model": "lenet",
        "partition": "pathological", "partition-classes": 2, "num-clients": 6, "unseen-fraction": 0.34,
        "num-server-rounds": 1, "fraction-train": 0.75, "batch-size": 8, "pefll.k": 3, "pefll.beta": 0.05,
        "pefll.descriptor-batch": 8, "pefll.embed-dim": 3, "fraction-evaluate": 0.0, "seed": 1,
        "results-dir": str(tmp_path / "results"), "run-name": "t",
    }


class RecordingGrid(InProcessGrid):
    """Keeps (node, message type, phase, arrays) of every message pushed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = []

    def push_messages(self, messages):
        messages = list(messages)
        for m in messages:
            c = m.content
            phase = c["config"].get("phase") if "config" in c.config_records else None
            arrays = {n: {k: torch.from_numpy(a.numpy().copy()) for k, a in r.items()}
                      for n, r in c.array_records.items()}
            self.sent.append((m.metadata.dst_node_id, m.metadata.message_type, phase, arrays))
        return super().push_messages(messages)


def run_recorded(run_config, offline=()):
    grid = RecordingGrid(client_app, run_config["num-clients"], run_config)
    grid.offline = set(offline)
    return run_local(run_config, grid=grid), grid


def test_three_phases_equal_end_to_end_autograd(image_config):
    """One step over messages == the same step differentiated end to end in one process:
    delta_eta = grad of sum_i <h(phi(B_i)), delta_theta_i> / c with delta_theta_i held fixed."""
    strategy, grid = run_recorded(image_config)
    cfg = parse_run_config(image_config)
    ref = PeFLL(cfg, model_for(cfg), strategy.dataset)  # the same seeded initial eta_h, eta_v
    ref.v_stats = strategy.v_stats  # m, s of the first descriptor (checked in test_standardization)
    pids = sorted(r for r in strategy.clients if r not in strategy.unseen)
    sampled = sorted({node - 101 for node, _, phase, _ in grid.sent if phase == "backprop"})
    assert len(sampled) == 3 and set(sampled) <= set(pids)

    surrogate = 0.0
    for pid in sampled:
        client = PeFLLClient(cfg, model_for(cfg), client_data(cfg, pid))
        x, y = client.batch_tensors(client.descriptor_batch(1, 8))
        theta = ref.h(descriptor(ref.embed, x, y))  # one graph: eta_v -> v -> (v - m) / s -> theta
        config = {"server-round": 1, **ref.sgd_config()}
        delta, _ = client.phase_train({"theta": {k: t.detach() for k, t in theta.items()}}, config)
        surrogate = surrogate + sum((theta[k] * delta["delta"][k]).sum() for k in theta) / len(sampled)
    grads = torch.autograd.grad(surrogate, [*ref.hnet.parameters(), *ref.embed.parameters()])
    decay = 1 - 2 * 0.05 * 1e-3
    pairs = [(n, p, new) for a, b in ((ref.hnet, strategy.hnet), (ref.embed, strategy.embed))
             for (n, p), new in zip(a.named_parameters(), b.parameters())]
    assert len(pairs) == len(grads)
    for (name, p, new), g in zip(pairs, grads):
        assert g.abs().max() > 0, name
        torch.testing.assert_close(new.detach(), decay * p.detach() + g, rtol=1e-4, atol=1e-6)


def test_descriptor_is_permutation_invariant(image_config):
    cfg = parse_run_config(image_config)
    strategy = PeFLL(cfg, model_for(cfg), dataset(cfg))
    client = PeFLLClient(cfg, model_for(cfg), client_data(cfg, 0))
    x, y = client.batch_tensors()
    with torch.no_grad():
        v = descriptor(strategy.embed, x, y)
        perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        v_perm = descriptor(strategy.embed, x[perm], y[perm], batch_size=7)
        v_other = descriptor(strategy.embed, x, y.roll(1))
    assert v.shape == (embed_dim(cfg),) == (3,)
    torch.testing.assert_close(v_perm, v, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(v_other, v)  # the labels enter the descriptor


def test_messages_unseen_clients_and_bytes(image_config):
    run_config = {**image_config, "num-server-rounds": 2, "fraction-evaluate": 1.0}
    strategy, grid = run_recorded(run_config)
    unseen_nodes = {101 + p for p in strategy.unseen}
    assert len(unseen_nodes) == 2
    # unseen clients get only evaluation messages: a descriptor request and their h(v)
    for node, mtype, phase, _ in grid.sent:
        if node in unseen_nodes:
            assert mtype in ("query", "evaluate"), (node, mtype, phase)
    assert {(m, p) for n, m, p, _ in grid.sent if n in unseen_nodes} == {
        ("query", None), ("evaluate", "descriptor"), ("evaluate", "evaluate")}
    # phase 2 messages are per client: different theta for each
    thetas = [a["theta"]["fc.weight"] for _, m, p, a in grid.sent if p == "train"]
    assert len(thetas) == 6
    assert all(not torch.allclose(a, b) for i, a in enumerate(thetas[:3]) for b in thetas[i + 1:3])
    # bytes per step: 2c (|theta| + |eta_v| + |v|) float32 values
    n_theta = sum(v.numel() for v in strategy.global_state.values())
    n_v = sum(p.numel() for p in strategy.embed.parameters())
    row = strategy.history[1]
    assert row["train-params-down"] == row["train-params-up"] == 3 * (n_theta + n_v + 3)
    # bytes add only the arrays' names and headers to 4 bytes a value
    assert 1 < row["train-bytes-down"] / (4 * row["train-params-down"]) < 1.01
    assert row["replies"] == 3
    assert {"fed-seen-accuracy", "fed-unseen-accuracy", "fed-unseen-acc-client-std"} <= set(strategy.history[-1])


def test_client_missing_in_a_phase_is_dropped(image_config, monkeypatch):
    real = PeFLLClient.phase_backprop

    def backprop(self, payload, config):
        if self.data.pid == sampled[0]:
            raise RuntimeError("gone")
        return real(self, payload, config)

    strategy, grid = run_recorded(image_config)
    sampled = sorted({node - 101 for node, _, phase, _ in grid.sent if phase == "backprop"})
    monkeypatch.setattr(PeFLLClient, "phase_backprop", backprop)
    dropped, _ = run_recorded(image_config)
    row = dropped.history[-1]
    assert row["replies"] == 2 and row["dropped-replies"] == 1
    assert any("gone" in r for r in row["dropped-reasons"])
    moved = [not torch.allclose(a, b) for a, b in zip(dropped.hnet.parameters(), strategy.hnet.parameters())]
    assert any(moved)  # the step went on with the two others, and differs from the full step


def test_label_and_unlabeled_descriptors(image_config):
    """label: a linear function of the label histogram only; unlabeled: of the images only."""
    x = torch.randn(10, 1, 28, 28)
    y = torch.tensor([0, 1, 1, 2, 3, 3, 3, 0, 1, 2])
    for kind, same, differs in (("label", (torch.randn_like(x), y), (x, y.roll(1) * 0)),
                                ("unlabeled", (x, y.flip(0) * 0), (x + 1, y))):
        cfg = parse_run_config({**image_config, "pefll.embedding": kind})
        phi = PeFLL(cfg, model_for(cfg), dataset(cfg)).embed
        with torch.no_grad():
            v = descriptor(phi, x, y)
            torch.testing.assert_close(descriptor(phi, *same), v)
            assert not torch.allclose(descriptor(phi, *differs), v), kind
        if kind == "label":
            hist = torch.bincount(y, minlength=4).float() / len(y)
            torch.testing.assert_close(v, phi.fc.weight.detach() @ hist + phi.fc.bias.detach())


def test_mlp_embedding_is_one_hidden_layer_on_image_and_label(image_config):
    """Table 9's MLP: the descriptor is the batch mean of W2 relu(W1 [flat x, one-hot y] + b1) + b2, 20 wide."""
    x = torch.randn(10, 1, 28, 28)
    y = torch.tensor([0, 1, 1, 2, 3, 3, 3, 0, 1, 2])
    cfg = parse_run_config({**image_config, "pefll.embedding": "mlp"})
    phi = PeFLL(cfg, model_for(cfg), dataset(cfg)).embed
    first, _, second = phi.net
    assert (first.in_features, first.out_features, second.out_features) == (28 * 28 + 4, 20, embed_dim(cfg))
    with torch.no_grad():
        inputs = torch.cat([x.flatten(1), torch.nn.functional.one_hot(y, 4).float()], 1)
        by_hand = (torch.relu(inputs @ first.weight.T + first.bias) @ second.weight.T + second.bias).mean(0)
        torch.testing.assert_close(descriptor(phi, x, y), by_hand)
        assert not torch.allclose(descriptor(phi, x, y.roll(1)), by_hand)  # the labels count
        assert not torch.allclose(descriptor(phi, x + 1, y), by_hand)  # and the images


def test_adam_variant_steps_by_server_lr(image_config):
    """The authors' code's update: Adam on -mean(delta) + 2 lambda eta, the gradients of eta_h and
    eta_v clipped together at server-clip; Adam's first step is lr * g / (|g| + eps)."""
    cfg = parse_run_config({**image_config, "pefll.server-opt": "adam", "pefll.server-lr": 1e-3,
                            "pefll.server-clip": 5.0})
    strategy = PeFLL(cfg, model_for(cfg), dataset(cfg))
    before = {n: [p.detach().clone() for p in getattr(strategy, n).parameters()] for n in ("hnet", "embed")}
    delta_h = [torch.randn_like(p) for p in before["hnet"]]
    delta_e = [[torch.randn_like(p) for p in before["embed"]] for _ in range(3)]
    strategy.apply({"hnet": (delta_h, 1e-3), "embed": strategy.embedding_update(dict(enumerate(delta_e)))})
    grads = [-d + 2 * 1e-3 * b for d, b in zip(delta_h, before["hnet"])]
    grads += [-torch.stack(ds).mean(0) + 2 * 1e-3 * b for b, *ds in zip(before["embed"], *delta_e)]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert norm > 5.0  # so the clipping acts
    after = [*strategy.hnet.parameters(), *strategy.embed.parameters()]
    for p, b, g in zip(after, before["hnet"] + before["embed"], grads):
        g = g * 5.0 / (norm + 1e-6)
        torch.testing.assert_close(p.detach(), b - 1e-3 * g / (g.abs() + 1e-8), rtol=0, atol=1e-7)


def test_standardization_and_config_errors(image_config):
    """m, s are the mean and std of the first sampled client's descriptor entries, fixed after; h
    sees (v - m) / s and delta_v is with respect to the raw v. Bad values fail with one line."""
    strategy, grid = run_recorded(image_config)
    cfg = parse_run_config(image_config)
    first = min(node - 101 for node, _, phase, _ in grid.sent if phase == "backprop")  # sample is sorted
    client = PeFLLClient(cfg, model_for(cfg), client_data(cfg, first))
    with torch.no_grad():  # its descriptor at the initial eta_v (a fresh strategy has it)
        v1 = descriptor(PeFLL(cfg, model_for(cfg), strategy.dataset).embed,
                        *client.batch_tensors(client.descriptor_batch(1, 8)))
    torch.testing.assert_close(strategy.v_stats, torch.stack([v1.mean(), v1.std()]))
    v = torch.randn(3)
    with torch.no_grad():
        want = strategy.hnet((v - strategy.v_stats[0]) / strategy.v_stats[1])
    for k, t in strategy.personal_model(v).items():
        torch.testing.assert_close(t, want[k])
    cfg = parse_run_config({**image_config, "pefll.standardize": False})
    assert PeFLL(cfg, model_for(cfg), strategy.dataset).v_stats is None
    with pytest.raises(ConfigError, match="'pefll.server-clip' = 50.0: clipping needs 'pefll.server-opt' adam"):
        PeFLL.check_config(parse_run_config({**image_config, "pefll.server-clip": 50.0}))
    for key, bad in (("pefll.hypernet", "wide"), ("pefll.momentum", 1.5), ("pefll.clip", -1.0)):
        with pytest.raises(ConfigError, match=f"'{key}'"):
            parse_run_config({**image_config, key: bad})

def test_descriptors_npz_beside_the_rounds(image_config):
    """Every evaluation appends each client's descriptor v to descriptors.npz in the run's own
    results folder, with its partition id, whether it is new and its training label counts; a
    second run of the same name writes into its own folder, never the first's."""
    cfg = {**image_config, "fraction-evaluate": 1.0, "num-server-rounds": 2}
    first = run_local(cfg)
    second = run_local(cfg)
    assert first.results_path != second.results_path
    for strategy in (first, second):
        doc = np.load(strategy.results_path / "descriptors.npz")
        assert list(doc["round"]) == [1, 2]
        assert doc["v"].shape == (2, 6, 3) and np.isfinite(doc["v"]).all()
        assert list(doc["pid"]) == list(range(6))
        assert sorted(np.flatnonzero(doc["new"])) == sorted(strategy.unseen)
        data = [client_data(parse_run_config(cfg), pid) for pid in range(6)]
        np.testing.assert_array_equal(doc["hist"], [np.bincount(d.train_y.numpy(), minlength=4) for d in data])


def test_standardization_of_a_descriptor_without_spread(image_config):
    """m, s are the mean and unbiased std of the first descriptor; a one-entry or constant
    descriptor has no spread, so s = 1 there (never a NaN that would make every model NaN)."""
    cfg = parse_run_config({**image_config, "pefll.standardize": True})
    strategy = PeFLL(cfg, model_for(cfg), dataset(cfg))
    strategy.set_standardization(torch.tensor([1.0, 2.0, 6.0]))
    torch.testing.assert_close(strategy.v_stats, torch.tensor([3.0, float(np.std([1, 2, 6], ddof=1))]))
    for v in (torch.tensor([4.0]), torch.tensor([2.0, 2.0])):
        strategy.v_stats = None
        strategy.set_standardization(v)
        torch.testing.assert_close(strategy.v_stats, torch.tensor([float(v[0]), 1.0]))


def test_stacked_vjps_equal_each_clients_own_autograd(image_config):
    """The server's two products over the stacked descriptors equal each client's own: delta_v_i row by
    row, and the summed delta_eta_h over any subset of the clients (a client that dropped out of the
    backprop phase is left out of the sum); with 'aggregation' mean the update is that sum / n. In
    float64, where the stacked and the one-by-one products differ only by their summation order's
    rounding (in float32 that reaches 2e-5 relative on some CPUs' kernels)."""
    cfg = parse_run_config(image_config)
    strategy = PeFLL(cfg, model_for(cfg), dataset(cfg))
    strategy.hnet.double()
    strategy.set_standardization(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    g = torch.Generator().manual_seed(3)
    v = {p: torch.randn(3, generator=g, dtype=torch.float64) for p in (1, 4, 5)}
    delta = {p: {k: torch.randn(t.shape, generator=g, dtype=torch.float64) for k, t in strategy.global_state.items()}
             for p in v}
    own_h, own_v = {}, {}
    for p in v:  # (d theta_p / d (eta_h, v_p))^T delta_theta_p, one client at a time
        vp = v[p].clone().requires_grad_(True)
        theta = strategy.h(vp)
        grads = torch.autograd.grad(list(theta.values()), [*strategy.hnet.parameters(), vp],
                                    grad_outputs=[delta[p][k] for k in theta])
        own_h[p], own_v[p] = grads[:-1], grads[-1]
    stacked_v = strategy.descriptor_vjp(v, delta)
    assert list(stacked_v) == [1, 4, 5]
    for p in v:
        torch.testing.assert_close(stacked_v[p], own_v[p], rtol=1e-12, atol=1e-12)
    for pids in ([1, 4, 5], [1, 5], [4]):
        summed = strategy.hypernetwork_vjp(v, delta, pids)
        mean = strategy.hypernetwork_update(v, delta, pids)
        for i, (s, m) in enumerate(zip(summed, mean)):
            want = sum(own_h[p][i] for p in pids)
            torch.testing.assert_close(s, want, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(m, want / len(pids), rtol=1e-12, atol=1e-12)
