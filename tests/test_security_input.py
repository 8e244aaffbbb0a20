"""Input a run reads from outside: checkpoints given as ``resume-from`` (fedapp/runtime/checkpoint.py),
client replies, which must belong to the message they answer and stay within their size limits
(fedapp/server/replies.py, fedapp/server/exchange.py), and request bodies at the Fleet proxy (scripts/fleet_proxy.py)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity

from fedapp.runtime import checkpoint
from fedapp.runtime.client_app import app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import run_local
from fedapp.runtime.server_app import build_strategy
from fedapp.server.discovery import ClientInfo
from fedapp.server.replies import REPLY_ARRAYS_MARGIN, REPLY_METRICS_MAX_KEYS, REPLY_RECORDS_MAX_BYTES
from test_deployment import ROOT, Federation, free_port
from test_deployment_proxy import NGINX, wait_listening
from test_reliability import config, image_tree, same_rows, tensors  # noqa: F401


class RunsCode:
    """Unpickled, it calls ``os.mkdir(marker)``: what a crafted checkpoint could do instead."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_checkpoint_load_runs_no_code(config, tmp_path, monkeypatch):
    """A checkpoint that would call a function when unpickled is refused with one line naming
    ``resume-from`` and the function, before the function runs; a checkpoint fedapp wrote loads
    back to the same state."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    base = config("scaffold", **{"num-clients": 4})
    strategy = build_strategy(parse_run_config(base))
    good = tmp_path / checkpoint.FILENAME
    checkpoint.save(strategy, good, 0)
    again = build_strategy(parse_run_config(base))
    for t in tensors(again):
        t.data.add_(1.0)
    assert checkpoint.resume(again, good) == 1
    assert all(torch.equal(a, b) for a, b in zip(tensors(again), tensors(strategy), strict=True))

    doc = checkpoint.load(good)
    marker = tmp_path / "code-ran"
    doc["attrs"]["history"] = [RunsCode(marker)]
    crafted = tmp_path / "crafted" / checkpoint.FILENAME
    crafted.parent.mkdir()
    torch.save(doc, crafted)
    with pytest.raises(ConfigError) as err:
        run_local({**base, "resume-from": str(crafted.parent)})
    assert str(err.value) == (f"run config 'resume-from' = {str(crafted)!r}: refused, it would call posix.mkdir "
                              "when loaded (a checkpoint holds only tensors and plain data, so this one could run code)")
    assert not marker.exists()


class Replaying:
    """fedapp's ClientApp, except that partition 0 trains every round as usual but answers rounds
    2 and later with its round-1 reply (``replay``) or with an error (the same reply dropped)."""

    def __init__(self, replay: bool):
        self.replay, self.first = replay, None

    def __call__(self, msg: Message, context) -> Message:
        reply = app(msg, context)
        if msg.metadata.message_type != MessageType.TRAIN or context.node_config["partition-id"] != 0:
            return reply
        if self.first is None:
            self.first = reply.content
            return reply
        if self.replay:
            return Message(self.first, reply_to=msg)
        raise RuntimeError("reply withheld")


def test_replayed_reply_refused(config, monkeypatch):
    """Partition 0 sends its round-1 training reply again in rounds 2 and 3 (valid arrays and
    metrics, only made for another message): it is dropped as ``replayed``, and the run's rows and
    state equal those of a run where that reply was an error (but for the bytes it brought)."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    cfg = config("fedavg", **{"num-clients": 4, "num-server-rounds": 3, "fraction-train": 1.0})
    replayed = run_local(cfg, client_app=Replaying(replay=True))
    dropped = run_local({**cfg, "run-name": "dropped"}, client_app=Replaying(replay=False))
    assert [r["replies"] for r in replayed.history[1:]] == [4, 3, 3]
    assert [r["dropped-reasons"] for r in replayed.history[1:]] == [{}, {"replayed": 1}, {"replayed": 1}]
    up = [k for k in replayed.history[-1] if "-up" in k]  # the replayed reply's bytes did arrive
    assert same_rows(replayed.history, dropped.history, skip=("dropped-reasons", *up))
    assert all(torch.equal(a, b) for a, b in zip(tensors(replayed), tensors(dropped), strict=True))


def test_oversized_config_and_metrics_are_dropped(config, monkeypatch):
    """A reply's config and metric records are bounded (keys, bytes): 100,000 metrics or a config
    record of 1 MiB are dropped as ``oversized``; the same reply without them is valid."""
    for name, value in (("_task_id", 1), ("_run_id", 1), ("_node_id", SUPERLINK_NODE_ID)):  # as a ServerApp's
        monkeypatch.setattr(TaskIdentity, name, value)
    strategy = build_strategy(parse_run_config(config("fedavg")))
    strategy.clients = {0: ClientInfo(101, 10, 2, False)}
    sent = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=101, message_type=MessageType.TRAIN)
    spec = {0: {"w": {"w": ((2,), torch.float32)}}}

    def reply(**records):
        content = RecordDict({"w": ArrayRecord({"w": Array(np.ones(2, np.float32))}), **records})
        if "metrics" not in records:
            content["metrics"] = MetricRecord({"partition-id": 0, "num-examples": 5})
        return Message(content, reply_to=sent)

    many = MetricRecord({"partition-id": 0, "num-examples": 5, **{f"m{i}": 0.0 for i in range(100_000)}})
    assert REPLY_METRICS_MAX_KEYS < 100_002 and REPLY_RECORDS_MAX_BYTES < 2**20
    for bad in ({"metrics": many}, {"extra": ConfigRecord({"blob": "x" * 2**20})}):
        strategy.driver.wire.dropped.clear()
        assert strategy.driver.parse_replies([reply(**bad)], spec) == []
        assert dict(strategy.driver.wire.dropped) == {"oversized": 1}
    assert [r.num_examples for r in strategy.driver.parse_replies([reply()], spec)] == [5]


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (scripts/setup.sh installs it)")
def test_proxy_refuses_an_oversized_body_before_forwarding_it(tmp_path):
    """scripts/fleet_proxy.py answers a Fleet request whose body exceeds --max-body-mb with 413 from
    its Content-Length; a body of one of Flower's array chunks (5 MiB and its framing) is forwarded
    (here to a SuperLink that is not running: 502)."""
    fed = Federation(tmp_path)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_credentials.py"), str(fed.creds)], check=True,
                   capture_output=True)
    public = free_port()
    (tmp_path / "proxy").mkdir()
    fed.start("proxy", [sys.executable, str(ROOT / "scripts" / "fleet_proxy.py"), "--listen", f"127.0.0.1:{public}",
                        "--superlink", f"127.0.0.1:{fed.port}", "--creds", str(fed.creds),
                        "--workdir", str(tmp_path / "proxy")])
    try:
        wait_listening(public)
        tls = ssl.create_default_context(cafile=str(fed.creds / "ca.crt"))

        def status(nbytes: int) -> int:
            request = urllib.request.Request(f"https://localhost:{public}/v1/fleet/push-object", data=b"\0" * nbytes,
                                             headers={"Content-Type": "application/protobuf"})
            try:
                return urllib.request.urlopen(request, context=tls, timeout=30).status
            except urllib.error.HTTPError as err:
                return err.code

        assert status(8 * 2**20 + 1) == 413
        assert status(5 * 2**20 + 4096) == 502
        assert "client intended to send too large body" in (tmp_path / "proxy" / "error.log").read_text()
    finally:
        fed.stop("proxy")


def test_oversized_arrays_dropped_before_decoding(config, monkeypatch):
    """A reply whose arrays are larger than ``REPLY_ARRAYS_MARGIN`` times the model it should send
    (4 MiB here) is dropped as ``oversized`` as it arrives, from the arrays' metadata and byte
    lengths: an extra record of 10x
    the model, the model's array holding 10x the bytes its shape declares, an evaluation reply with
    10x the arrays it was sent. With ``reply-memory-mb = 0`` (a kept reply goes to disk and is read
    back) the server allocates under 1 MiB while it reads one; the valid reply still passes."""
    import tracemalloc

    from simulations.reply_memory import MODEL, bogus, read, reply_to, setup

    for name in ("_task_id", "_run_id", "_node_id"):  # setup() sets them as a ServerApp's: restored after
        monkeypatch.setattr(TaskIdentity, name, getattr(TaskIdentity, name, None))
    strategy, sent, spec = setup(config("fedavg", **{"reply-memory-mb": 0}))
    big = 10 * 4 * MODEL
    assert REPLY_ARRAYS_MARGIN < 10
    padded = Array(dtype="float32", shape=(MODEL,), stype="numpy.ndarray",
                   data=sent.content["w"]["w"].data + bytes(big))
    cases = {"extra record": (reply_to(sent, bogus=bogus(big)), spec),
             "held > declared": (reply_to(sent, w=ArrayRecord({"w": padded})), spec),
             "evaluation": (reply_to(sent, bogus=bogus(big)), {0: None})}
    assert [r.num_examples for r in read(strategy, sent, spec, reply_to(sent))] == [5]  # (and imports made)
    for case, (reply, expected) in cases.items():
        tracemalloc.start()
        kept = read(strategy, sent, expected, reply)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert (kept, dict(strategy.driver.wire.dropped)) == ([], {"oversized": 1}), case
        assert peak < 2**20, (case, peak)
