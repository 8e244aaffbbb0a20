"""Sites bound to SuperNode keys (``site-keys``, fedapp/server/sites.py): which node may serve which
partition is decided by its public key, as the SuperLink reports it, not by who answers first."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.app import Context, MessageType, RecordDict
from flwr.proto.node_pb2 import NodeInfo

from fedapp.server import sites
from fedapp.runtime.client_app import app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.runtime.launch import process_tree
from fedapp.runtime.server_app import build_strategy, run, superlink_authenticates
from test_deployment import SITES, federation, free_port, rounds, run_config, signal_all  # noqa: F401
from test_reliability import config, image_tree  # noqa: F401


def keypair():
    """A SuperNode's public key as its site's ``.pub`` file (OpenSSH) and as the SuperLink reports it (PEM)."""
    public = ec.generate_private_key(ec.SECP384R1()).public_key()
    return (public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode(),
            public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


class KeyedGrid(InProcessGrid):
    """Deployment-like SuperNodes (no ``num-partitions``) with the public keys ``pems`` (node 101 + i:
    ``pems[i]``), reported by ``get_nodes`` as Flower's HTTP grid reports a SuperLink's nodes; every
    message a node gets is noted in ``got``."""

    def __init__(self, run_config, claims, pems):
        super().__init__(app, len(claims), run_config, [{"partition-id": p} for p in claims])
        self.pems = dict(zip(self.contexts, pems))
        self.got: list[tuple[int, str]] = []

    def get_nodes(self):
        return [NodeInfo(node_id=n, public_key=self.pems[n]) for n in self.get_node_ids()]

    def push_messages(self, messages):
        messages = list(messages)
        self.got += [(m.metadata.dst_node_id, m.metadata.message_type) for m in messages]
        return super().push_messages(messages)


def write_table(path, entries):
    path.write_text("".join(f'[{name}]\npublic-key = "{pub}"\npartition-id = {pid}\n\n' for name, pub, pid in entries))
    return str(path)


@pytest.mark.parametrize("impostor_first", [True, False])
def test_partition_bound_to_site_key(impostor_first, config, tmp_path, monkeypatch, caplog):
    """Three sites in site-keys (partitions 0-2) and a fourth registered key claiming partition 0,
    connected before or after the real site: the fourth node is refused at discovery with one
    line naming its key, never gets a training or evaluation message, and site A's node serves
    partition 0 in every round. A site's own key claiming another's partition (a mistyped
    partition-id) is refused the same way."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    (a, a_pem), (b, b_pem), (c, c_pem), (_, d_pem) = keypair(), keypair(), keypair(), keypair()
    table = write_table(tmp_path / "site-keys.toml", [("site-a", a, 0), ("site-b", b, 1), ("site-c", c, 2)])
    cfg = config("fedavg", **{"num-clients": 3, "num-server-rounds": 2, "site-keys": table,
                              "node-wait-timeout": 0.0})
    nodes = [(0, d_pem), (0, a_pem), (1, b_pem), (2, c_pem)]
    if not impostor_first:
        nodes = nodes[1:] + nodes[:1]
    grid = KeyedGrid(cfg, [p for p, _ in nodes], [k for _, k in nodes])
    impostor = 101 if impostor_first else 104
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy = run(grid, cfg)
    site_a = 102 if impostor_first else 101
    assert {pid: c.node_id for pid, c in strategy.clients.items()} == {0: site_a, 1: site_a + 1, 2: site_a + 2}
    assert [t for n, t in grid.got if n == impostor] == [MessageType.QUERY] * 3  # discovery at the start and each round
    assert [r["replies"] for r in strategy.history[1:]] == [3, 3]
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals == [f"node {impostor} refused: its key {sites.pem_fingerprint(d_pem)} is not in site-keys "
                        "(it claims partition 0)"]

    # site C's own key, started with partition-id=0: refused, and partition 0 stays site A's
    grid = KeyedGrid({**cfg, "run-name": "mistyped"}, [0, 0, 1], [c_pem, a_pem, b_pem])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy = run(grid, {**cfg, "run-name": "mistyped"})
    assert {pid: c.node_id for pid, c in strategy.clients.items()} == {0: 102, 1: 103}
    assert [r.getMessage() for r in caplog.records if "refused" in r.getMessage()] == [
        f"node 101 refused: its key {sites.pem_fingerprint(c_pem)} is site 'site-c''s, bound to partition 2, "
        "but it claims partition 0"]


def test_partitions_bound_to_first_keys_without_site_keys(config, tmp_path, monkeypatch, caplog):
    """No site-keys, under SuperNode authentication: each partition is bound to the first key that
    claims it, for the rest of the run. A third key claiming partition 0 after site A is refused and
    never trains, also once site A's node is gone; site A back with its key (a new node) serves it
    again; site B's key claiming partition 0 is refused."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    monkeypatch.setattr("fedapp.runtime.server_app.superlink_authenticates", lambda: True)
    (_, a_pem), (_, b_pem), (_, d_pem) = keypair(), keypair(), keypair()
    fp = {pem: sites.pem_fingerprint(pem) for pem in (a_pem, b_pem, d_pem)}
    cfg = config("fedavg", **{"num-clients": 2, "num-server-rounds": 2, "node-wait-timeout": 0.0})
    grid = KeyedGrid(cfg, [0, 1, 0], [a_pem, b_pem, d_pem])
    with caplog.at_level(logging.INFO, logger="flwr"):
        strategy = run(grid, cfg)
    assert {pid: c.node_id for pid, c in strategy.clients.items()} == {0: 101, 1: 102}
    assert [t for n, t in grid.got if n == 103] == [MessageType.QUERY] * 3  # discovery at the start and each round
    assert [r["replies"] for r in strategy.history[1:]] == [2, 2]
    said = [r.getMessage() for r in caplog.records if " bound to " in r.getMessage()]
    assert said == [f"partition 0 bound to key {fp[a_pem]} (node 101) for the rest of the run: the first key to "
                    "claim it (no site-keys)",
                    f"partition 1 bound to key {fp[b_pem]} (node 102) for the rest of the run: the first key to "
                    "claim it (no site-keys)",
                    f"node 103 refused: partition 0 is bound to key {fp[a_pem]}, the first to claim it (no "
                    f"site-keys), not to its key {fp[d_pem]}"]

    driver = strategy.driver
    del grid.contexts[101]  # site A's node is gone: the third key is still refused
    driver.nodes.discover(grid)
    assert driver.clients[0].node_id == 101 and 103 in driver.nodes.unbound
    for node, pem in ((104, b_pem), (105, a_pem)):  # site B's key, then site A back, claiming partition 0
        grid.contexts[node] = Context(1, node, {"partition-id": 0}, RecordDict(), cfg)
        grid.pems[node] = pem
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="flwr"):
        driver.nodes.discover(grid)
    assert driver.clients[0].node_id == 105 and 103 in driver.nodes.unbound
    assert [r.getMessage() for r in caplog.records if " bound to " in r.getMessage()] == [
        f"node 104 refused: its key {fp[b_pem]} is bound to partition 1, which it claimed first (no site-keys), "
        "but it claims partition 0"]


def test_the_serverapp_reads_supernode_authentication_from_its_superlink():
    """From the nearest flower-superlink ancestor's command line, as Flower's parser reads it."""
    child = "import subprocess; subprocess.run(['sleep', '60'])"
    for flags, authenticates in ((["--enable-supernode-auth", "--ssl-certfile", "s.pem"], True), (["--insecure"], False)):
        parent = subprocess.Popen([sys.executable, "-c", child, "bin/flower-superlink", *flags])
        try:
            deadline = time.time() + 30
            while len(tree := process_tree(parent.pid)) < 2:
                assert time.time() < deadline
                time.sleep(0.05)
            assert superlink_authenticates(tree[-1]) is authenticates
            assert superlink_authenticates(parent.pid) is False  # not below a SuperLink
        finally:
            signal_all(process_tree(parent.pid), 9)
            parent.wait()


def test_site_keys_table_is_one_to_one(tmp_path, config):
    """Two keys for one partition, one key for two sites, a partition outside num-clients, or a
    simulation given a table: refused before the run starts, with one line."""
    (a, _), (b, _) = keypair(), keypair()
    cases = {"two-keys": ([("site-a", a, 0), ("site-b", b, 0)], "partition 0 has two keys"),
             "one-key": ([("site-a", a, 0), ("site-b", a, 1)], "is given to both site 'site-a' and site 'site-b'"),
             "outside": ([("site-a", a, 3)], "partition-id 3, outside 0..1")}
    for name, (entries, why) in cases.items():
        with pytest.raises(ConfigError, match=why) as err:
            sites.load(write_table(tmp_path / f"{name}.toml", entries), 2)
        assert "\n" not in str(err.value) and "'site-keys'" in str(err.value)
    table = write_table(tmp_path / "ok.toml", [("site-a", a, 0), ("site-b", b, 1)])
    assert sorted((s.name, s.partition) for s in sites.load(table, 2).values()) == [("site-a", 0), ("site-b", 1)]
    with pytest.raises(ConfigError, match="'site-keys' binds partitions to SuperNode keys"):
        run_local(config("fedavg", **{"num-clients": 2, "site-keys": table}))
    assert build_strategy(parse_run_config(config("fedavg"))).driver.nodes.sites is None  # without it: as before


@pytest.mark.slow
def test_superlink_reports_the_keys_site_keys_binds(federation, tmp_path):
    """On loopback with SuperNode authentication (tests/test_deployment.py's federation): site C's
    registered key, started with site A's partition-id=0, is refused by its key's fingerprint
    in the ServerApp's log, and sites A and B both train."""
    creds = federation.creds
    table = tmp_path / "site-keys.toml"
    table.write_text("".join(f'[{site}]\npublic-key-file = "{creds / site}.pub"\npartition-id = {pid}\n\n'
                             for site, pid in SITES.items()))
    federation.start("site-c", ["flower-supernode", "--superlink", f"127.0.0.1:{federation.port}",
                                "--auth-supernode-private-key", str(creds / "site-c"), "--port", str(free_port()),
                                "--root-certificates", str(creds / "ca.crt"),
                                "--node-config", "partition-id=0 num-partitions=2"])
    try:
        federation.wait_for("site-c", "SuperNode ID:")
        run_id = federation.submit(run_config({"strategy": "fedavg", "num-server-rounds": 1, "fraction-train": 1.0,
                                               "site-keys": str(table), "results-dir": str(tmp_path),
                                               "run-name": "keys"}))
        results = tmp_path / "keys" / "rounds.json"
        status = federation.wait_finished(run_id, results, 2, timeout=600)
    finally:
        federation.stop("site-c")
    assert status["status"] == "finished:completed", status
    assert [r["replies"] for r in rounds(results)[1:]] == [2]
    key = sites.fingerprint(serialization.load_ssh_public_key((creds / "site-c.pub").read_bytes()))
    log = subprocess.run(["flwr", "log", str(run_id), "sites", "--show"], env=federation.cli_env, capture_output=True,
                         text=True, timeout=180).stdout  # the ServerApp's log
    assert f"refused: its key {key} is not in site-keys (it claims partition 0)" in log, log[-3000:]
    assert "Receiving: train message" not in federation.log("site-c")
