"""One test per hook of fedapp/core/compat.py: what fedapp uses of Flower beyond its public API."""

import inspect

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid

from fedapp.core import compat


def test_lacks_handler_recognises_a_clientapp_without_that_function():
    app = ClientApp()

    @app.train()
    def train(msg, context):
        return msg

    compat.set_task_identity(1, 1, SUPERLINK_NODE_ID)  # a Message is built as a ServerApp builds it
    query = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=1, message_type=MessageType.QUERY)
    with pytest.raises(ValueError) as err:
        app(query, None)
    # as Flower's SuperNode and simulation wrap it: "<class 'ValueError'>:<'...'>"
    error = Error(code=0, reason=f"{type(err.value)}:<'{err.value}'>")
    assert compat.lacks_handler(error, MessageType.QUERY)
    assert not compat.lacks_handler(error, MessageType.TRAIN)
    assert not compat.lacks_handler(Error(code=0, reason="<class 'KeyError'>:<'batch-size'>"), MessageType.QUERY)


def test_flower_grids_are_flowers_grids():
    http, memory = compat.flower_grids()
    assert (http.__name__, memory.__name__) == ("HttpGrid", "InMemoryGrid")
    assert issubclass(http, Grid) and issubclass(memory, Grid)


def test_engine_pickup_is_a_thread_target_stopped_by_an_event():
    target = compat.engine_pickup()
    assert callable(target) and target.__name__ == "add_messages_to_queue"
    annotations = [str(p.annotation) for p in inspect.signature(target).parameters.values()]
    assert any("Event" in a for a in annotations)


def test_supernode_parser_reads_a_supernode_command_line():
    args, _ = compat.supernode_parser().parse_known_args(["--superlink", "10.0.0.1:9092", "--insecure"])
    assert (args.superlink, args.insecure) == ("10.0.0.1:9092", True)
    assert hasattr(args, "root_certificates")


def test_encode_decode_round_trip():
    content = RecordDict({"arrays": ArrayRecord({"w": torch.arange(3.0)}),
                          "metrics": MetricRecord({"num-examples": 5}), "config": ConfigRecord({"lr": 0.1})})
    back = compat.decode(compat.encode(content))
    assert back["arrays"]["w"].numpy().tolist() == [0.0, 1.0, 2.0]
    assert dict(back["metrics"]) == {"num-examples": 5} and dict(back["config"]) == {"lr": 0.1}


def test_task_identity_names_the_messages_built_here():
    compat.set_task_identity(1, 4242, SUPERLINK_NODE_ID)
    assert compat.task_identity() == (1, 4242, SUPERLINK_NODE_ID)
    assert Message(RecordDict(), dst_node_id=3, message_type=MessageType.TRAIN).metadata.run_id == 4242


def test_gitignore_matcher_reads_patterns(tmp_path):
    (tmp_path / ".gitignore").write_text(".venv/\n*.pt\n")
    matcher = compat.gitignore_matcher(tmp_path / ".gitignore")
    assert matcher.match_file(".venv/") and matcher.match_file("a/model.pt") and not matcher.match_file("a.py")


def test_flatten_dict_flattens_tables():
    assert compat.flatten_dict({"a": {"b": 1, "c": {"d": "x"}}, "e": 2.0}) == {"a.b": 1, "a.c.d": "x", "e": 2.0}


def test_app_component_reads_the_app_folder_first_on_sys_path(tmp_path, monkeypatch):
    for name, clientapp in (("other", "other.client:app"), ("app", "mine.client_app:app")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pyproject.toml").write_text(
            f'[tool.flwr.app.components]\nserverapp = "fedapp.runtime.server_app:app"\nclientapp = "{clientapp}"\n')
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "pyproject.toml").write_text('[project]\nname = "not-a-flower-app"\n')
    monkeypatch.setattr("sys.path", [str(tmp_path / d) for d in ("plain", "app", "other")])
    assert compat.app_component("clientapp") == "mine.client_app:app"
    assert compat.app_component("serverapp") == "fedapp.runtime.server_app:app"
    monkeypatch.setattr("sys.path", [str(tmp_path / "plain")])
    assert compat.app_component("clientapp") is None


def test_answers_tells_which_message_types_a_clientapp_takes():
    plain, full = ClientApp(), ClientApp()
    for app in (plain, full):
        app.train()(lambda msg, context: msg)
    full.query()(lambda msg, context: msg)
    assert compat.answers(plain, MessageType.TRAIN) and compat.answers(full, MessageType.QUERY)
    assert not compat.answers(plain, MessageType.QUERY) and not compat.answers(plain, MessageType.EVALUATE)
    legacy = ClientApp(client_fn=lambda context: None)  # a client_fn takes every message type
    assert compat.answers(legacy, MessageType.QUERY)


def test_flwr_cli_runs_flower_with_the_fab_built_beforehand(tmp_path, monkeypatch, capsys):
    import importlib

    from flwr.cli.build import build_fab_from_disk

    from fedapp.runtime.launch import ROOT, app_files

    run = importlib.import_module("flwr.cli.run.run")
    monkeypatch.setattr(run, "build_fab_from_disk", run.build_fab_from_disk)  # undone after the test
    monkeypatch.setattr("sys.argv", ["pytest"])
    app = tmp_path / "app"
    (app / "pkg").mkdir(parents=True)
    (app / "pyproject.toml").write_bytes((ROOT / "examples" / "plain-flower-client" / "pyproject.toml").read_bytes())
    (app / "pkg" / "m.py").write_text("x = 1\n")
    cli = compat.flwr_cli({"pyproject.toml": app / "pyproject.toml"}, app)
    # `flwr run` of that folder gets the FAB of the files given, not of what the folder holds now
    assert run.build_fab_from_disk(app) == run.build_fab_from_disk(str(app) + "/") != build_fab_from_disk(app)
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_bytes((app / "pyproject.toml").read_bytes())
    assert run.build_fab_from_disk(other) == build_fab_from_disk(other)
    with pytest.raises(SystemExit) as done:
        cli(["--version"])
    assert done.value.code in (0, None) and "1.4" in capsys.readouterr().out


def test_constants_are_flowers():
    compat.set_task_identity(1, 7, compat.SERVER_NODE_ID)  # a ServerApp's message: from Flower's server node
    assert Message(RecordDict(), dst_node_id=3, message_type=MessageType.TRAIN).metadata.src_node_id == SUPERLINK_NODE_ID
    from flwr.app import Array

    assert Array(np.arange(3.0)).stype == compat.NUMPY_STYPE


def test_client_app_callable_is_what_a_mod_gets_as_call_next():
    from flwr.clientapp.typing import ClientAppCallable

    assert compat.ClientAppCallable == ClientAppCallable


def test_parse_config_args_reads_pairs_and_files(tmp_path):
    (tmp_path / "c.toml").write_text('strategy = "fedprox"\n[fedprox]\nmu = 0.01\n')
    assert compat.parse_config_args(["num-server-rounds=3 lr=0.1 name='a b'"]) == {
        "num-server-rounds": 3, "lr": 0.1, "name": "a b"}
    assert compat.parse_config_args([str(tmp_path / "c.toml")]) == {"strategy": "fedprox", "fedprox.mu": 0.01}


def test_trim_mean_cuts_each_end():
    values = np.array([[0.0], [1.0], [2.0], [3.0], [100.0]])
    assert compat.trim_mean(values, 0.2).tolist() == [2.0]  # 0 and 100 cut: mean of 1, 2, 3
    assert compat.trim_mean(values, 0.0).tolist() == [21.2]


def test_select_multikrum_keeps_the_replies_near_the_others():
    contents = [RecordDict({"arrays": ArrayRecord([np.array([v, v])])}) for v in (0.0, 0.1, 0.2, 50.0)]
    chosen = compat.select_multikrum(contents, 1, 2)
    assert len(chosen) == 2 and all(c is not contents[3] for c in chosen)
