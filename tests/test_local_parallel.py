"""The in-process engine's worker processes change nothing but speed: a run with the clients of
each exchange spread over two forked workers is bit-identical to the serial run."""

import pytest
import torch

from fedapp.runtime.client_app import app
from fedapp.runtime.inprocess import InProcessGrid, run_local


def test_two_workers_give_the_serial_run_bit_for_bit(small_config):
    """FedSMOO (client state in the context, kept across rounds), on a model with dropout (torch's
    global generator during training), with federated evaluation, and a partition that fails."""
    cfg = {**small_config, "strategy": "fedsmoo", "model": "hcct-mlp", "num-server-rounds": 2,
           "num-threads": 1, "fault-fraction": 0.25, "fault-kind": "raise"}
    serial = run_local({**cfg, "local-workers": 1})
    grid = InProcessGrid(app, 4, {**cfg, "local-workers": 2})
    parallel = run_local({**cfg, "local-workers": 2}, grid=grid)
    assert grid.workers == 2 and grid._pool is None  # closed at the end of the run
    for k, v in serial.global_state.items():
        assert torch.equal(parallel.global_state[k], v), k
    rows = [[{k: v for k, v in r.items() if not k.endswith(("-seconds", "-time"))} for r in s.history]
            for s in (serial, parallel)]
    assert rows[0] == rows[1] and len(rows[0]) == 3  # every metric of every round (0..2)
    assert all(r["dropped-replies"] for r in rows[0][1:])  # the failing partition's error replies came back
    states = [n for ctx in grid.contexts.values() for n in ctx.state.array_records if n.startswith("state.")]
    assert states  # the duals came back from the workers into this process's contexts


def test_a_nodes_messages_run_in_turn_with_its_context():
    """Two messages to one node in one push: the second sees the state the first committed."""
    from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    counter = ClientApp()

    @counter.query()
    def count(msg, context):
        n = int(context.state["n"]["n"]) + 1 if "n" in context.state else 1
        context.state["n"] = ConfigRecord({"n": n})
        return Message(RecordDict({"m": MetricRecord({"n": n})}), reply_to=msg)

    grid = InProcessGrid(counter, 2, {}, workers=2)
    msgs = [grid.create_message(RecordDict(), "query", node, "g") for node in (101, 101, 102, 101)]
    replies = grid.pull_messages(grid.push_messages(msgs))
    grid.close()
    assert [r.content["m"]["n"] for r in replies] == [1, 2, 1, 3]
    assert grid.contexts[101].state["n"]["n"] == 3


@pytest.mark.slow
def test_gpu_runs_spawn_workers_that_import_the_app(small_config, monkeypatch):
    """Where the clients would train on CUDA the workers are spawned, not forked, and import
    fedapp's ClientApp by name; the run is still the serial one (here on the CPU: torch in the
    spawned workers finds no GPU)."""
    import fedapp.runtime.inprocess as inprocess

    cfg = {**small_config, "strategy": "fedavg", "num-server-rounds": 1, "num-threads": 1, "device": "auto"}
    serial = run_local({**cfg, "local-workers": 1})
    assert inprocess.start_method(app, cfg)[0] == "fork"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert inprocess.start_method(app, cfg) == ("spawn", inprocess.APP_REF)
    assert inprocess.start_method(app, {**cfg, "device": "cpu"})[0] == "fork"
    other = object()  # any other app is forked, never pickled
    assert inprocess.start_method(other, cfg) == ("fork", other)
    methods = []
    real = inprocess.mp.get_context
    monkeypatch.setattr(inprocess.mp, "get_context", lambda m=None: methods.append(m) or real(m))
    spawned = run_local({**cfg, "local-workers": 2})
    assert methods == ["spawn"]
    for k, v in serial.global_state.items():
        assert torch.equal(spawned.global_state[k], v), k
