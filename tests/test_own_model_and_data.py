"""Your own model and data (docs/own-model-and-data.md): a model from the user's own package
(``model = "<module>:<callable>"``), a CSV table, hub datasets' columns, text, per-site data, and the
one-line refusals of what cannot work."""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

from fedapp.core.config import ConfigError
from fedapp.core.data import load_dataset, prepare, sources
from fedapp.core.data.tables import ColumnError, infer_columns
from fedapp.core.data.text import CharTokenizer, PAD, speaking_roles, token_dtype
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.core.models import build_model
from fedapp.runtime.preflight import check

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own-model"
DATA = EXAMPLE / "data"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """The example's package importable (as PYTHONPATH makes it for a user), a private cache."""
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))  # the tests' own throwaway model modules


def example_config(tmp_path, **extra) -> dict:
    """The docs page's run: mynet:build on the plants table, one client per site."""
    return {"model": "mynet:build", "dataset": "table", "data-dir": str(DATA), "label-column": "kind",
            "client-column": "site", "partition": "natural", "num-clients": 4, "num-server-rounds": 4,
            "local-steps": 10, "lr": 0.1, "seed": 1, "results-dir": str(tmp_path / "results"), "run-name": "r",
            **extra}


SETTINGS = {"fedavg": {}, "fedprox": {"fedprox.proximal-mu": 0.01}, "scaffold": {},
            "fedsmoo": {"fedsmoo.rho": 0.05}, "fedals": {"fedals.alpha": 2},
            "pefll": {"pefll.k": 10, "pefll.beta": 0.1}}


@pytest.mark.parametrize("strategy, via", [(s, "in process") for s in SETTINGS]
                         + [pytest.param("fedavg", "flwr run", marks=pytest.mark.slow)])
def test_own_model_and_csv_data(tmp_path, monkeypatch, strategy, via):
    cfg = example_config(tmp_path, strategy=strategy, **SETTINGS[strategy])
    if via == "flwr run":
        from fedapp.runtime.launch import LAUNCH_ID, launch

        monkeypatch.setenv("PYTHONPATH", f"{EXAMPLE}:{ROOT}")  # the user's package, for Flower's processes
        monkeypatch.setenv(LAUNCH_ID, uuid.uuid4().hex)
        overrides = " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in cfg.items())
        status = launch(overrides, home=tmp_path / "flwr-home", port_base=39490, stream=False, timeout=300)
        assert status["status"] == "finished:completed"
        rows = json.loads((tmp_path / "results" / "r" / "rounds.json").read_text())["rounds"]
    else:
        strategy_obj = run_local(cfg)
        rows = strategy_obj.history
        if strategy == "fedals":  # the split the model declares: its classifier is FedALS's head
            assert strategy_obj.head_keys == ["classifier.weight", "classifier.bias"]
            assert strategy_obj.body_keys == [k for k in strategy_obj.global_state if k.startswith("body.")]
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4]
    assert all(r["replies"] == 4 for r in rows[1:])
    if strategy == "pefll":  # personal models only: the clients' own test splits
        assert rows[-1]["fed-loss"] < rows[1]["fed-loss"] and rows[-1]["train-loss"] < rows[1]["train-loss"]
        assert rows[-1]["fed-accuracy"] >= rows[1]["fed-accuracy"]
    else:  # the three kinds are well apart: from chance to nearly all right in four rounds
        assert rows[0]["central-accuracy"] < 0.6 and rows[-1]["central-accuracy"] >= 0.9


def test_robust_keeps_heterogeneous_honest_sites(tmp_path):
    """PeFLL on the plants table under the robust defence: site 2's personal updates are several
    times the others' norm, so the norm bound clips them (rounds 1 and 2) instead of dropping the
    site; the direction screen drops one reply of 4 in rounds 3 and 4, and every round's accuracy
    equals the plain mean's."""
    cfg = example_config(tmp_path, strategy="pefll", **SETTINGS["pefll"])
    default = run_local({**cfg, "defence": "robust"})
    plain = run_local({**cfg, "run-name": "plain"})
    assert [r["replies"] for r in default.history[1:]] == [4] * 4
    assert [r["clipped-replies"] for r in default.history[1:]] == [1, 1, 0, 0]
    assert [r["dropped-replies"] for r in default.history[1:]] == [0, 0, 1, 1]
    assert [r["clipped-replies"] + r["dropped-replies"] for r in plain.history[1:]] == [0] * 4
    assert [r["fed-accuracy"] for r in default.history[1:]] == [r["fed-accuracy"] for r in plain.history[1:]]
    assert default.history[-1]["fed-accuracy"] == 1.0


def test_table_features_are_encoded_with_the_training_split(tmp_path):
    (tmp_path / "train.csv").write_text("a,c,y\n1,red,x\n3,blue,z\n5,red,x\n,red,z\n")
    (tmp_path / "test.csv").write_text("a,c,y\n3,green,x\n7,blue,w\n")
    ds = load_dataset("table", str(tmp_path), options=(("label-column", "y"),))
    mean, std = 3.0, np.std([1, 3, 5])  # the missing value is left out of the statistics
    # a: standardised, the missing value at the mean; c: one-hot over the training values blue, red
    expected = [[(1 - mean) / std, 0, 1], [0, 1, 0], [(5 - mean) / std, 0, 1], [0, 0, 1]]
    assert torch.allclose(ds.train_x, torch.tensor(expected, dtype=torch.float32))
    assert torch.allclose(ds.test_x, torch.tensor([[0, 0, 0], [(7 - mean) / std, 1, 0]], dtype=torch.float32))
    assert ds.num_classes == 3  # w, x, z: the labels of both splits, sorted
    assert ds.train_y.tolist() == [1, 2, 1, 2] and ds.test_y.tolist() == [1, 0]


def test_table_without_test_file_holds_a_fraction_out(tmp_path):
    lines = "\n".join(f"{i},{i % 2}" for i in range(50))
    (tmp_path / "train.csv").write_text(f"f,label\n{lines}\n")
    ds = load_dataset("table", str(tmp_path), options=(("global-test-fraction", 0.2),))
    assert (len(ds.train_y), len(ds.test_y)) == (40, 10)


def test_parquet_table_reads_like_csv(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"f": [0.5, 1.5, 2.5, 3.5], "label": [0, 1, 0, 1]})
    (tmp_path / "csv").mkdir()
    (tmp_path / "parquet").mkdir()
    frame.to_csv(tmp_path / "csv" / "train.csv", index=False)
    frame.to_parquet(tmp_path / "parquet" / "train.parquet")
    a, b = (load_dataset("table", str(tmp_path / d), options=(("global-test-fraction", 0.25),))
            for d in ("csv", "parquet"))
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)


def test_text_column_is_tokenised_and_padded(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\nabba,pos\nbaaab,neg\n")
    (tmp_path / "test.csv").write_text("text,label\nabcd,neg\n")
    ds = load_dataset("table", str(tmp_path), options=(("text-column", "text"),))
    # ids: 0 padding, 1 unknown, then the training characters a, b
    assert ds.vocab_size == 4 and ds.train_x.dtype == torch.int8 and ds.input_shape == (5,)
    assert ds.train_x.tolist() == [[2, 3, 3, 2, 0], [3, 2, 2, 2, 3]]
    assert ds.test_x.tolist() == [[2, 3, 1, 1, 0]]
    assert prepare(ds.train_x).dtype == torch.int64  # token ids reach the model as int64


def test_lstm_reads_each_padded_row_at_its_last_token():
    torch.manual_seed(0)
    model = build_model("lstm", (6,), 5, vocab_size=9, seq_len=6).eval()
    x = torch.tensor([[3, 4, 5, PAD, PAD, PAD]])
    with torch.no_grad():
        assert torch.allclose(model(x), model(x[:, :3]), atol=1e-6)


def test_char_tokenizer_dtype_follows_the_vocabulary():
    assert token_dtype(128) == torch.int8 and token_dtype(129) == torch.int16
    tok = CharTokenizer(["hello"])
    # e h l o are 2 3 4 5; '!' is unknown (1); a short text is padded with 0
    assert tok.vocab_size == 6 and tok.encode(["lol!", "he"], 4).tolist() == [[4, 5, 4, 1], [3, 2, 0, 0]]


def test_speaking_roles_follow_leaf_turns():
    play = textwrap.dedent("""\
        PERSONS REPRESENTED.

        Ham., a prince.

        ACT I.

        Scene I. A platform.

        [Enter Ham. and
        Hor.]

        Ham.
        Who's there?
        Stand.

        HOR.
        A friend.
        [Aside.]
        So.
        """)
    assert dict(speaking_roles(play)) == {"HAM": ["Who's there?", "Stand."], "HOR": ["A friend.", "So."]}


# --------------------------------------------------------------------------- refusals, before anything starts


def write_module(tmp_path: Path, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))


@pytest.mark.parametrize("model, source, key, words", [
    ("nosuchpkg:build", None, "model", "cannot import module 'nosuchpkg'"),
    ("mynet:missing", None, "model", "has no attribute 'missing'"),
    ("notmod:build", "def build(input_shape, num_classes):\n    return 3\n", "model", "not a torch.nn.Module"),
    ("wrongin:build", "import torch\ndef build(input_shape, num_classes):\n    return torch.nn.Linear(3, num_classes)\n",
     "model", "cannot take dataset 'table'"),
    ("wrongout:build", "import torch\ndef build(input_shape, num_classes):\n    return torch.nn.Linear(input_shape[0], 2)\n",
     "model", "not (batch, 3 classes)"),
])
def test_a_model_that_cannot_work_is_refused_in_one_line(tmp_path, model, source, key, words):
    if source:
        write_module(tmp_path, model.partition(":")[0], source)
    with pytest.raises(ConfigError) as err:
        check(example_config(tmp_path, model=model))
    assert f"'{key}'" in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


UNDECLARED = """\
    import torch
    class Net(torch.nn.Module):
        def __init__(self, d, c):
            super().__init__()
            self.fc1 = torch.nn.Linear(d, 8)
            self.out = torch.nn.Linear(8, c)
        def forward(self, x):
            return self.out(torch.relu(self.fc1(x)))
    def build(input_shape, num_classes):
        return Net(input_shape[0], num_classes)
    """


@pytest.mark.parametrize("strategy", ["fedals", "fedrep", "hcct-p"])
def test_a_split_the_model_does_not_declare_is_refused(tmp_path, strategy):
    write_module(tmp_path, "plainnet", UNDECLARED)
    with pytest.raises(ConfigError, match=r"run config 'head-modules' = '' is invalid for .*declares no head") as err:
        check(example_config(tmp_path, model="plainnet:build", strategy=strategy))
    assert "\n" not in str(err.value)
    cfg = check(example_config(tmp_path, model="plainnet:build", strategy=strategy, **{"head-modules": "out"}))
    assert cfg.head_modules == "out"


def test_pefll_refuses_a_model_above_the_size_it_generates(tmp_path):
    write_module(tmp_path, "bignet", """\
        import torch
        def build(input_shape, num_classes):
            return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 2000), torch.nn.Linear(2000, 600),
                                       torch.nn.Linear(600, num_classes))
        """)
    # 7 features (4 numbers, 3 colours; the site is the client column): 16,000 + 1,200,600 + 1,803
    with pytest.raises(ConfigError, match=r"'model' = 'bignet:build' has 1,218,403 parameters: PeFLL's "
                                          r"hypernetwork generates models of at most 1,000,000"):
        check(example_config(tmp_path, model="bignet:build", strategy="pefll"))


def test_missing_label_column_and_unparsable_file_name_key_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^run config 'label-column' = 'species' is not a column of .*train\.csv "
                                          r"\(its columns: height, width"):
        check(example_config(tmp_path, **{"label-column": "species"}))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.csv").write_text("a,b,label\n1,2,0\n3,4,1\n5,6,7,8\n")
    with pytest.raises(ConfigError, match=r"'data-dir' = .*cannot parse .*train\.csv: .*line 4") as err:
        check(example_config(tmp_path, **{"data-dir": str(bad), "label-column": "label", "client-column": "",
                                          "partition": "iid", "num-clients": 2}))
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- Hugging Face hub (no network)


def test_hub_columns_are_inferred_where_unambiguous():
    text = datasets.Features({"sentence": datasets.Value("string"), "y": datasets.ClassLabel(names=["a", "b"])})
    assert infer_columns(text, {"label-column": "label"}, "hub")["label-column"] == "y"
    assert infer_columns(text, {"label-column": "label"}, "hub")["text-column"] == "sentence"
    images = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a"]),
                                "writer": datasets.Value("string")})
    got = infer_columns(images, {"label-column": "label", "client-column": "writer"}, "hub")
    assert (got["image"], got["label-column"]) == ("img", "label")
    two = datasets.Features({"a": datasets.ClassLabel(names=["x"]), "b": datasets.ClassLabel(names=["y"]),
                             "f": datasets.Value("float32")})
    with pytest.raises(ColumnError, match=r"'label-column' = 'label' is not a column of hub and its label cannot "
                                          r"be inferred \(2 class-label columns\)"):
        infer_columns(two, {"label-column": "label"}, "hub")


def test_hub_dataset_offline_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "_hub_reachable", lambda: False)
    with pytest.raises(ConfigError) as err:
        check(example_config(tmp_path, dataset="hf:someone/plants", partition="iid", **{"client-column": ""}))
    assert str(err.value) == ("run config 'dataset' = 'hf:someone/plants': hub dataset 'someone/plants' cannot be "
                              "loaded: the Hugging Face hub cannot be reached (hf: datasets are online only; offline, "
                              "save the data as train.csv and use dataset='table')")


# --------------------------------------------------------------------------- every site its own data


def test_each_site_trains_on_its_own_table(tmp_path):
    import pandas as pd

    from fedapp.runtime.client_app import app

    frame = pd.read_csv(DATA / "train.csv")
    sites = []
    for name in ("north", "south"):  # each site's own rows, in its own folder
        (tmp_path / name).mkdir()
        frame[frame.site == name].to_csv(tmp_path / name / "train.csv", index=False)
        sites.append(str(tmp_path / name))
    # numeric features only: one-hot columns would follow each site's own values
    cfg = example_config(tmp_path, partition="iid", **{"client-column": "", "num-clients": 2, "num-server-rounds": 2,
                                                       "feature-columns": "height,width,leaves,wetness"})
    check(cfg)
    nodes = [{"partition-id": i, "data-dir": d} for i, d in enumerate(sites)]
    strategy = run_local(cfg, grid=InProcessGrid(app, 2, cfg, node_configs=nodes))
    sizes = {pid: info.num_train + info.num_test for pid, info in strategy.clients.items()}
    assert sizes == {0: int((frame.site == "north").sum()), 1: int((frame.site == "south").sum())}
    assert strategy.history[-1]["central-accuracy"] > strategy.history[0]["central-accuracy"]


def test_a_test_file_without_the_training_columns_is_refused(tmp_path):
    (tmp_path / "train.csv").write_text("a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n")
    (tmp_path / "test.csv").write_text("a,label\n1,0\n")
    with pytest.raises(ConfigError, match=r"^run config 'data-dir': the test split beside .*train\.csv lacks the "
                                          r"column\(s\) b of its training split$"):
        check({"dataset": "table", "data-dir": str(tmp_path), "partition": "iid"})


def test_text_classification_trains_with_padded_sequences(tmp_path):
    """Sequence classification end to end: texts of 4 to 12 characters (padded to 12), class 0 drawn
    from the letters a-e and class 1 from f-j; FedAvg with the built-in lstm learns to tell them apart."""
    rng = np.random.default_rng(0)
    rows = ["text,label"]
    for i in range(240):
        label = i % 2
        letters = list("abcde" if label == 0 else "fghij")
        rows.append(f"{''.join(rng.choice(letters, rng.integers(4, 13)))},{label}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("\n".join(rows) + "\n")
    strategy = run_local({"dataset": "table", "data-dir": str(tmp_path / "data"), "text-column": "text",
                          "model": "lstm", "partition": "iid", "num-clients": 2, "num-server-rounds": 3,
                          "local-steps": 10, "lr": 0.5, "results-dir": str(tmp_path / "r"), "run-name": "r"})
    rows = strategy.history
    assert rows[0]["central-accuracy"] < 0.7 and rows[-1]["central-accuracy"] >= 0.9
