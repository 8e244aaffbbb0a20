"""The performance shortcuts change nothing but speed: fast array decoding, the gather-based
crop, per-process client data, and client state spilled to disk; Ray's workers keep the run's
priority."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import Array, ArrayRecord

import fedapp.runtime.client_app
from fedapp.runtime.client_app import app
from fedapp.core.data.loader import PAD, crop_flip
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.core.records import array_numpy

ROOT = Path(__file__).resolve().parents[1]


def test_array_numpy_equals_flower_decoding():
    rec = ArrayRecord({"f": torch.randn(3, 4), "i": torch.arange(5), "s": torch.tensor(2.0),
                       "t": torch.randn(6, 5).t(), "e": torch.zeros(0, 3, dtype=torch.uint8),
                       "b": torch.tensor([True, False]), "d": torch.randn(2, 2).double()})
    rec["big-endian"] = Array(np.arange(6, dtype=">i4").reshape(2, 3))
    for k, a in rec.items():
        fast, ref = array_numpy(a), a.numpy()
        assert fast.dtype == ref.dtype and fast.shape == ref.shape and np.array_equal(fast, ref), k
        assert fast.flags.writeable, k


def test_crop_flip_equals_advanced_indexing():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 255, (16, 3, 8, 8), dtype=torch.uint8, generator=g)
    oy, ox = torch.randint(0, 2 * PAD + 1, (2, 16), generator=g)
    flip = torch.rand(16, generator=g) < 0.5
    padded = F.pad(x, (PAD,) * 4)
    rows = oy[:, None] + torch.arange(8)
    cols = ox[:, None] + torch.where(flip[:, None], 7 - torch.arange(8), torch.arange(8))
    ref = padded[torch.arange(16)[:, None, None, None], torch.arange(3)[None, :, None, None],
                 rows[:, None, :, None], cols[:, None, None, :]]
    assert torch.equal(crop_flip(x, oy, ox, flip), ref)


def test_spilled_client_state_gives_the_same_run(small_config, tmp_path):
    """SCAFFOLD's control variates kept on disk (state-memory-mb tiny) train exactly as in memory."""
    cfg = {**small_config, "strategy": "scaffold", "num-server-rounds": 3, "fraction-evaluate": 0.0}
    in_memory = run_local(cfg)
    spilled_cfg = {**cfg, "state-memory-mb": 1e-6, "state-spill-dir": str(tmp_path / "spill"),
                   "keep-client-state": True}
    grid = InProcessGrid(app, 4, spilled_cfg)
    spilled = run_local(spilled_cfg, grid=grid)
    for k, v in in_memory.global_state.items():
        assert torch.equal(spilled.global_state[k], v), k
    for ctx in grid.contexts.values():  # only a reference in the context, the arrays on disk
        assert not any(n.startswith("state.") for n in ctx.state.array_records)
        versions = ctx.state["state-versions"]
        assert versions[str(versions["latest"])].startswith(str(tmp_path / "spill"))
    assert len(list((tmp_path / "spill").glob("*.pt"))) == 4


def test_evaluation_batches_of_128_on_cpu_with_the_same_numbers():
    from fedapp.core.training import evaluate

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5))
    x, y = torch.randn(300, 3, 2, 2), torch.randint(0, 5, (300,))
    sizes = []
    model.register_forward_hook(lambda _m, inputs, _out: sizes.append(len(inputs[0])))
    m = evaluate(model, x, y)
    assert sizes == [128, 128, 44]
    one = evaluate(model, x, y, batch_size=300)
    assert m["accuracy"] == one["accuracy"] and m["num-examples"] == 300
    assert abs(m["loss"] - one["loss"]) < 1e-6


def test_cpu_evaluation_runs_channels_last_with_the_nchw_numbers():
    from fedapp.core.data import prepare
    from fedapp.core.models import build_model
    from fedapp.core.training import evaluate

    torch.manual_seed(0)
    model = build_model("hcct-cnn", (3, 32, 32), 10).eval()
    x, y = torch.randint(0, 256, (300, 3, 32, 32), dtype=torch.uint8), torch.randint(0, 10, (300,))
    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    layouts = []
    model.register_forward_hook(
        lambda _m, inputs, _out: layouts.append(inputs[0].is_contiguous(memory_format=torch.channels_last)))
    m = evaluate(model, x, y, mean=mean, std=std)
    assert layouts == [True, True, True]
    with torch.no_grad():  # the same batches in NCHW
        out = torch.cat([model(prepare(x[i:i + 128], mean, std)) for i in range(0, 300, 128)])
    assert m["accuracy"] == (out.argmax(1) == y).double().mean().item()
    assert m["loss"] == pytest.approx(torch.nn.functional.cross_entropy(out, y).item(), rel=1e-6)


@pytest.mark.parametrize("key, ours", [("RAY_worker_niceness", "0"), ("RAY_prestart_worker_first_driver", "0")])
def test_ray_workers_keep_the_priority_of_the_run_and_none_idle_is_prestarted(monkeypatch, key, ours):
    """Ray would start the simulated clients at nice 15, and prestart idle workers that the clients'
    actors do not use; the ClientApp module, which the simulation process imports before it starts Ray,
    asks for the run's own priority and no prestarted workers, unless the user set these."""
    saved = dict(vars(fedapp.runtime.client_app))  # a reload rebinds `app`, which other tests hold by identity
    try:
        for user, expected in ((None, ours), ("7", "7")):
            if user is None:
                monkeypatch.delenv(key, raising=False)
            else:
                monkeypatch.setenv(key, user)
            importlib.reload(fedapp.runtime.client_app)
            assert os.environ[key] == expected
    finally:
        vars(fedapp.runtime.client_app).update(saved)


def test_a_client_process_does_not_load_the_superlink():
    """What a Ray worker loads for a message (the ClientApp, the run config with every algorithm's
    keys, the algorithm's client) leaves out flwr.superlink, which only a server needs."""
    code = ("import sys, fedapp.runtime.client_app\nfrom fedapp.runtime import registry\n"
            "from fedapp.runtime.registry import parse_run_config\n"
            "registry.get(parse_run_config({'strategy': 'pefll', 'model': 'lenet'}).strategy)\n"
            "print(sorted(m for m in sys.modules if m.startswith('flwr.superlink')))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[-2] == "[]"


def test_reply_polling_waits_at_most_20_ms_in_a_simulation_and_100_ms_over_http(monkeypatch):
    """Flower's grids sleep 0.1 s (simulation) or 3 s (HTTP) between pulls; the strategies poll
    from 10 ms up to 20 ms in memory (PeFLL makes three exchanges a step) and 0.1 s over HTTP."""
    from flwr.superlink.grid import HttpGrid, InMemoryGrid

    from fedapp.server import transport

    for grid_type, longest in ((InMemoryGrid, 0.02), (HttpGrid, 0.1)):
        class Slow(grid_type):  # the reply arrives at the 12th pull
            def __init__(self):
                self.pulls = 0

            def push_messages(self, messages):
                return ["m1"]

            def pull_messages(self, ids):
                self.pulls += 1
                return [] if self.pulls < 12 else [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id="m1"))]

        waits = []
        monkeypatch.setattr(transport.time, "sleep", waits.append)
        assert len(transport.send_and_receive(Slow(), ["a message"], timeout=None)) == 1
        assert waits == [min(0.01 * 2 ** i, longest) for i in range(11)]


def _patches(ax) -> list[tuple]:
    return [(p.get_x(), p.get_y(), p.get_width(), p.get_height(), tuple(p.get_facecolor())) for p in ax.patches]


def test_partition_figure_draws_the_counts_as_flower_datasets_does():
    """The bars are the partition's class counts, stacked, and every bar, colour, tick and legend
    entry is the one flwr-datasets' plot_label_distributions draws from the labels themselves."""
    import datasets
    from flwr_datasets.visualization import plot_label_distributions

    from fedapp.runtime.results import partition_figure

    class Fixed:  # partitions in flwr-datasets' Partitioner shape
        dataset = datasets.Dataset.from_dict({"label": np.random.default_rng(0).integers(0, 4, 300)})
        num_partitions = 23

        def load_partition(self, i):
            return self.dataset.select(range(i * 13, (i + 1) * 13))

    labels = np.asarray(Fixed.dataset["label"])
    counts = np.stack([np.bincount(labels[i * 13:(i + 1) * 13], minlength=4) for i in range(23)])
    ref, _, frame = plot_label_distributions(Fixed(), "label", plot_type="bar", legend=True, verbose_labels=False,
                                             title="t")
    fig = partition_figure(counts, "t")
    ax = fig.axes[0]
    heights = np.array([p.get_height() for p in ax.patches]).reshape(4, 23).T  # class by class
    assert np.array_equal(heights, counts) and np.array_equal(frame.to_numpy(), counts)
    assert _patches(ax) == _patches(ref.axes[0])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["3", "2", "1", "0"] == [
        t.get_text() for t in ref.legends[0].get_texts()]
    assert [(t.get_text(), t.get_visible()) for t in ax.get_xticklabels()] == [
        (t.get_text(), t.get_visible()) for t in ref.axes[0].get_xticklabels()]
    assert ax.get_xlim() == ref.axes[0].get_xlim() and ax.get_title() == "t"


def test_partition_names_are_the_partitioners():
    from fedapp.core.data import PARTITION_NAMES, PARTITIONERS

    assert PARTITION_NAMES == tuple(PARTITIONERS)


def test_cached_partitions_equal_the_computed_ones(tmp_path, monkeypatch):
    """The index arrays read from the cache are the partitioners' own, for a list (partitions) and
    a tuple of lists (pfedhn); other inputs make another file."""
    from fedapp.core import experiment
    from fedapp.core.data.partitioners import partition_indices, pfedhn_partitions

    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path))
    labels = np.random.default_rng(0).integers(0, 10, 500)
    calls = []

    def build(seed):
        calls.append(seed)
        return partition_indices("dirichlet", labels, 7, seed, alpha=0.3)

    for seed in (1, 1, 2, 2):
        got = experiment.cached_indices("partitions", ("dirichlet", 7, seed, labels), lambda: build(seed))
        want = partition_indices("dirichlet", labels, 7, seed, alpha=0.3)
        assert type(got) is list and len(got) == 7
        assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want))
    assert calls == [1, 2] and len(list(tmp_path.glob("partitions-*.npz"))) == 2
    want = pfedhn_partitions(labels, labels[:100], 5, 2, 0)
    for _ in range(2):
        got = experiment.cached_indices("pfedhn-partitions", (labels, 5), lambda: pfedhn_partitions(labels, labels[:100], 5, 2, 0))
        assert type(got) is tuple and [len(g) for g in got] == [len(w) for w in want]
        assert all(np.array_equal(g, w) for gs, ws in zip(got, want) for g, w in zip(gs, ws))


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_cached_dataset_is_mapped_from_its_file_and_writes_stay_private(tmp_path, monkeypatch):
    """The decoded images come back from the cache as a copy-on-write mapping of the file, both when
    the file is written and when it is read again: processes share the pages and none of them can
    change the file."""
    from fedapp.core.data import sources

    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path))
    images = torch.randint(0, 256, (300, 3, 8, 8), dtype=torch.uint8)
    arrays = {"train_x": images, "train_y": torch.arange(300) % 10, "test_y": torch.arange(20) % 10, "num_classes": 10}
    for _ in range(2):  # built and written, then read back
        got = sources._cached("toy", "key", lambda: {k: v.clone() if torch.is_tensor(v) else v for k, v in arrays.items()})
        (file,) = tmp_path.glob("toy-*.pt")
        assert torch.equal(got["train_x"], images) and got["num_classes"] == 10
        assert str(file) in Path("/proc/self/maps").read_text()
        got["train_x"][0] = 0
    assert torch.equal(torch.load(file)["train_x"], images)


@pytest.mark.slow
def test_a_client_process_leaves_the_partitioners_and_their_packages_out(small_config, tmp_path):
    """Once the run's partitions are cached (the launcher's check computes them), a client process
    serves its messages without Hugging Face datasets, flwr-datasets, pandas or matplotlib (1.4 CPU s
    of imports) and gets the same client data."""
    code = ("import json, sys\nimport numpy as np\nimport fedapp.runtime.client_app as ca\n"
            "from fedapp.runtime.registry import parse_run_config\n"
            "cfg = parse_run_config(json.loads(sys.argv[1]))\n"
            "data = [ca.cached_client_data(cfg, pid, None) for pid in range(cfg.num_clients)]\n"
            "print(json.dumps([[int(x) for x in d.train_y] for d in data]))\n"
            "print(sorted(m for m in ('datasets', 'flwr_datasets', 'pandas', 'matplotlib',"
            " 'fedapp.core.data.partitioners') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDAPP_CACHE": str(tmp_path / "cache")}
    cfg = json.dumps({**small_config, "partition": "dirichlet", "partition-alpha": 0.5})
    first = subprocess.run([sys.executable, "-c", code, cfg], env=env, capture_output=True, text=True, check=True)
    again = subprocess.run([sys.executable, "-c", code, cfg], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split("\n")[-2] == ("['datasets', 'fedapp.core.data.partitioners', 'flwr_datasets', "
                                           "'matplotlib', 'pandas']")
    assert again.stdout.split("\n")[-2] == "[]"
    assert again.stdout.split("\n")[-3] == first.stdout.split("\n")[-3]


def test_partition_indices_read_as_arrow_equal_the_row_by_row_reading(monkeypatch):
    """Every partitioner's index arrays, read from its partitions as one Arrow column, are the
    ones numpy gets by iterating the partitions' rows."""
    import datasets

    from fedapp.core.data.partitioners import PARTITIONERS, partition_indices

    labels = np.random.default_rng(0).integers(0, 10, 400)
    natural = np.arange(400) % 8
    for name in PARTITIONERS:
        kw = {"natural_ids": natural} if name == "natural" else {}
        fast = partition_indices(name, labels, 8, 1, num_shards=16, **kw)
        with monkeypatch.context() as m:  # the reading before: np.asarray over the column, row by row
            m.setattr(datasets.Dataset, "with_format", lambda self, kind: _RowByRow(self))
            slow = partition_indices(name, labels, 8, 1, num_shards=16, **kw)
        assert len(fast) == len(slow) == 8, name
        assert all(f.dtype == np.int64 and np.array_equal(f, s) for f, s in zip(fast, slow)), name


class _RowByRow:
    def __init__(self, ds):
        self.ds = ds

    def __getitem__(self, key):
        return SimpleNamespace(to_numpy=lambda: np.asarray(self.ds[key], dtype=np.int64))


def test_channels_last_training_gives_nchw_batches_values_and_model_up_to_rounding():
    from clients.base import FedClient
    from fedapp.runtime.registry import parse_run_config
    from fedapp.core.data import BatchLoader
    from fedapp.core.experiment import ClientData
    from fedapp.core.models import build_model

    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 256, (96, 3, 32, 32), dtype=torch.uint8, generator=g), torch.randint(0, 10, (96,), generator=g)
    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    for augment in (False, True):
        nchw, nhwc = (BatchLoader(x, y, 32, device="cpu", mean=mean, std=std, augment=augment, channels_last=cl,
                                  generator=torch.Generator().manual_seed(1)) for cl in (False, True))
        for (a, ya), (b, yb) in zip(nchw, nhwc):
            assert a.is_contiguous() and b.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(a, b) and torch.equal(ya, yb)

    models = {}
    for cl in (False, True):
        cfg = parse_run_config({"strategy": "fedavg", "dataset": "cifar10", "model": "hcct-cnn", "partition": "iid",
                                "channels-last": cl})
        torch.manual_seed(0)
        client = FedClient(cfg, build_model("hcct-cnn", (3, 32, 32), 10),
                           ClientData(0, x, y, x[:0], y[:0], 10, mean, std, True), device="cpu")
        client.config = {"batch-size": 32, "optimizer": "sgd", "momentum": 0.9, "weight-decay": 0.0, "grad-clip": 0.0,
                         "augment-recipe": "standard", "lr-schedule": "constant"}
        client.local_sgd(6, 0.05, seed=2)
        models[cl] = client.model_tensors()
    for k, v in models[False].items():  # the same six steps, rounded differently
        assert v.is_contiguous() and models[True][k].is_contiguous()
        torch.testing.assert_close(models[True][k], v, rtol=1e-4, atol=1e-5)
