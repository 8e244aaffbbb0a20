"""A federation of sites on loopback, deployed as across real sites (docs/deployment.md):
a SuperLink with TLS and SuperNode authentication, two registered SuperNodes (sites A and
B, simulated partitions 0 and 1, each with a state-dir), runs submitted with `flwr run`
through a named connection and switched between strategies only by --run-config.

Every process a test starts (and what those start: SuperExec, ServerApp, ClientApps) is
stopped at the end, also when a test fails.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from cryptography.hazmat.primitives import serialization

from fedapp.server import sites
from fedapp.runtime.client_app import app, load_state
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.launch import process_tree
from fedapp.runtime.inprocess import InProcessGrid, run_local
from tests.conftest import app_checkout

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# seed 10 samples partition 0, 1, 0 in rounds 1-3 (one client a round): site A sits out round 2
BASE = {"num-clients": 2, "num-server-rounds": 3, "fraction-train": 0.5, "fraction-evaluate": 0.0,
        "local-steps": 3, "batch-size": 16, "seed": 10, "node-wait-timeout": 120, "round-timeout": 120}
SITES = {"site-a": 0, "site-b": 1}
pytestmark = pytest.mark.slow


def run_config(overrides: dict) -> str:
    """BASE with ``overrides`` as a --run-config string."""
    values = {**BASE, **overrides}
    return " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in values.items())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def signal_all(pids, sig) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def rounds(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["rounds"]
    except FileNotFoundError:
        return []


def latest_state(folder: Path, pattern: str) -> Path:
    """The newest state version file ``<run-key>-<strategy>-p<pid>-r<round>.pt`` matching ``pattern``."""
    return max(folder.glob(f"{pattern}-r*.pt"), key=lambda p: int(p.stem.rsplit("-r", 1)[1]))


class Federation:
    """The processes of one federation, their logs, and the `flwr` CLI pointed at it."""

    def __init__(self, root: Path):
        self.root = root
        self.creds = root / "creds"
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        self.app = app_checkout(root / "app")  # `flwr run` of the checkout would walk its .venv
        self.cli_env = self.env(root / "cli")
        (root / "cli" / "config.toml").write_text(
            f'[superlink]\ndefault = "sites"\n\n[superlink.sites]\naddress = "127.0.0.1:{self.port}"\n'
            f'root-certificates = "{self.creds / "ca.crt"}"\n')

    @staticmethod
    def env(home: Path) -> dict:
        home.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "FLWR_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
                "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
                "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "OMP_NUM_THREADS": "1"}

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        """Start ``args`` in ``root/name`` (its cwd and FLWR_HOME), logging to ``root/name.log``."""
        with open(self.root / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(args, cwd=self.root / name, env=self.env(self.root / name), stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str, grace: float = 20.0) -> None:
        """SIGTERM (a SuperNode then leaves the federation) and, after ``grace`` s, SIGKILL."""
        proc = self.procs.pop(name)
        tree = process_tree(proc.pid) if proc.poll() is None else []  # an exited pid may be reused
        signal_all(tree, signal.SIGTERM)
        deadline = time.time() + grace
        while time.time() < deadline and any(alive(p) for p in tree):
            proc.poll()
            time.sleep(0.2)
        signal_all([p for p in tree if alive(p)], signal.SIGKILL)
        try:  # leftovers in its process group, e.g. the SuperExec of a SuperNode that was refused
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def start_superlink(self) -> None:
        """The SuperLink, with TLS, SuperNode authentication and its state in a database file, so
        that it can be restarted after a crash with its registered nodes and runs."""
        log = self.root / "superlink.log"
        started = log.read_text(errors="replace").count("Uvicorn running on https://") if log.exists() else 0
        self.start("superlink", [
            "flower-superlink", "--ssl-ca-certfile", str(self.creds / "ca.crt"),
            "--ssl-certfile", str(self.creds / "server.pem"), "--ssl-keyfile", str(self.creds / "server.key"),
            "--enable-supernode-auth", "--host", "127.0.0.1", "--port", str(self.port),
            "--database", str(self.root / "superlink.db")])
        self.wait_for("superlink", "Uvicorn running on https://", count=started + 1)

    def supernode(self, site: str, extra: list[str] = (), ca: bool = True) -> subprocess.Popen:
        pid = SITES.get(site, len(SITES))
        node_config = f"partition-id={pid} num-partitions=2 state-dir='{self.root / 'state' / site}'"
        return self.start(site, [
            "flower-supernode", "--superlink", f"127.0.0.1:{self.port}",
            "--auth-supernode-private-key", str(self.creds / site), "--port", str(free_port()),
            "--node-config", node_config, *(["--root-certificates", str(self.creds / "ca.crt")] if ca else []),
            *extra])

    def wait_for(self, name: str, text: str, count: int = 1, timeout: float = 300.0) -> None:
        """Until ``name``'s log (appended to across restarts) holds ``text`` ``count`` times."""
        deadline = time.time() + timeout
        while self.log(name).count(text) < count:
            assert time.time() < deadline, f"{name} did not log {text!r}:\n{self.log(name)[-3000:]}"
            assert self.procs[name].poll() is None, f"{name} exited:\n{self.log(name)[-3000:]}"
            time.sleep(0.2)

    def flwr(self, *args: str) -> dict:
        out = subprocess.run(["flwr", *args, "--format", "json"], env=self.cli_env, cwd=self.root, text=True,
                             capture_output=True, timeout=180)
        try:
            result = json.loads(out.stdout)
        except ValueError:
            result = {}
        assert result.get("success"), f"flwr {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
        return result

    def submit(self, config: str) -> str:
        return self.flwr("run", str(self.app), "sites", "--run-config", config)["run-id"]

    def wait_finished(self, run_id: str, results: Path, num_rows: int, timeout: float = 300.0) -> dict:
        """The run's final `flwr ls` entry. Each `flwr ls` is a CLI start (about 1.5 CPU s), so it is
        asked every 3 s once ``results`` has its ``num_rows`` rows, before that only every 60 s (in
        case the run failed)."""
        deadline, asked, status = time.time() + timeout, time.time(), {"status": "not asked yet"}
        while True:
            if time.time() - asked > (3 if len(rounds(results)) >= num_rows else 60):
                asked = time.time()
                status = self.flwr("ls", "sites", "--run-id", run_id)["runs"][0]
                if status["status"].startswith("finished"):
                    return status
            assert time.time() < deadline, f"run {run_id} still {status['status']}:\n{self.log('superlink')[-3000:]}"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    fed = Federation(tmp_path_factory.mktemp("federation"))
    try:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_credentials.py"), str(fed.creds),
                        "site-a", "site-b", "site-c", "site-d"], check=True, capture_output=True)
        fed.start_superlink()
        # site-d is never registered; site-c is, but will lack the CA certificate
        sites = ("site-a", "site-b", "site-c")
        with ThreadPoolExecutor(len(sites)) as pool:
            ids = pool.map(lambda s: fed.flwr("supernode", "register", str(fed.creds / f"{s}.pub"), "sites"), sites)
        fed.node_ids = {site: out["node-id"] for site, out in zip(sites, ids)}
        for site in SITES:
            fed.supernode(site)
        for site in SITES:
            fed.wait_for(site, "SuperNode ID:")
        yield fed
    finally:
        for name in list(fed.procs):
            fed.stop(name)


def test_fedavg_run_completes_on_the_registered_sites(federation, tmp_path):
    run_id = federation.submit(run_config({"strategy": "fedavg", "num-server-rounds": 1,
                                           "results-dir": str(tmp_path), "run-name": "fedavg"}))
    results = tmp_path / "fedavg" / "rounds.json"
    status = federation.wait_finished(run_id, results, 2)
    assert status["status"] == "finished:completed", status
    rows = rounds(results)
    assert [r["round"] for r in rows] == [0, 1]
    assert rows[1]["replies"] == 1 and rows[1]["dropped-replies"] == 0 and rows[1]["train-loss"] > 0
    assert not list((federation.root / "state").rglob("fedavg-*"))  # stateless clients write no state files
    # the SuperLink authenticates SuperNodes and no site-keys is given: each partition is bound to its site's key
    log = subprocess.run(["flwr", "log", str(run_id), "sites", "--show"], env=federation.cli_env, capture_output=True,
                         text=True, timeout=180).stdout  # the ServerApp's log
    for site, pid in SITES.items():
        key = sites.fingerprint(serialization.load_ssh_public_key((federation.creds / f"{site}.pub").read_bytes()))
        assert f"partition {pid} bound to key {key} (node {federation.node_ids[site]}) for the rest of the run" in log, \
            log[-3000:]


def test_scaffold_run_keeps_client_state_across_a_supernode_restart(federation, tmp_path):
    """Site A trains in rounds 1 and 3 and is restarted in between. Site B, which trains
    round 2, is frozen meanwhile: round 3 cannot start, and address A, before A is back.
    A's control variate comes back from its state-dir: the run equals an in-process run
    whose clients never restart, round by round and in both sites' final control variates."""
    overrides = {"strategy": "scaffold", "results-dir": str(tmp_path), "run-name": "scaffold", "keep-client-state": True}
    run_id = federation.submit(run_config(overrides))
    results = tmp_path / "scaffold" / "rounds.json"
    deadline = time.time() + 300
    while len(rounds(results)) < 2:  # round 0 (initial evaluation) and round 1
        assert time.time() < deadline and federation.procs["site-a"].poll() is None
        time.sleep(0.2)
    site_b = process_tree(federation.procs["site-b"].pid)
    signal_all(site_b, signal.SIGSTOP)
    try:
        federation.stop("site-a")
        federation.supernode("site-a")
        federation.wait_for("site-a", "SuperNode ID:", count=2)  # it is back in the federation
    finally:
        signal_all(site_b, signal.SIGCONT)
    status = federation.wait_finished(run_id, results, 4)
    assert status["status"] == "finished:completed", status
    assert "Receiving: train message" in federation.log("site-a").rsplit("SuperNode ID:", 1)[1]

    cfg = parse_run_config({**BASE, **overrides, "results-dir": str(tmp_path / "reference")})
    grid = InProcessGrid(app, 2, cfg.as_dict())
    reference = run_local(cfg.as_dict(), grid=grid)
    rows = rounds(results)
    assert [r["round"] for r in rows] == [0, 1, 2, 3]
    for row, ref in zip(rows[1:], reference.history[1:]):
        assert row["dropped-replies"] == 0
        assert row["train-loss"] == pytest.approx(ref["train-loss"], rel=1e-5)
        assert row["central-loss"] == pytest.approx(ref["central-loss"], rel=1e-5)
    for site, pid in SITES.items():
        run_key = json.loads(results.read_text())["run-key"]
        saved = torch.load(latest_state(federation.root / "state" / site, f"{run_key}-scaffold-p{pid}"), weights_only=True)
        expected = load_state(grid.contexts[reference.clients[pid].node_id], cfg)
        for k, v in expected["control"].items():
            assert torch.allclose(saved["control"][k], v, atol=1e-6), (site, k)


def test_unregistered_supernode_is_refused(federation):
    node = federation.supernode("site-d")
    assert node.wait(timeout=120) == 1  # docs/deployment.md: exit status 1
    log = federation.log("site-d")
    assert "Failed to initialize the connection to the SuperLink" in log and "Failed to activate SuperNode" in log
    assert "Receiving" not in log
    nodes = federation.flwr("supernode", "ls", "sites")["nodes"]
    assert sorted(int(n["node-id"]) for n in nodes) == sorted(federation.node_ids.values())


def test_supernode_without_the_ca_certificate_cannot_connect(federation):
    node = federation.supernode("site-c", ["--max-retries", "1", "--max-wait-time", "10"], ca=False)
    assert node.wait(timeout=120) != 0
    log = federation.log("site-c")
    assert "CERTIFICATE_VERIFY_FAILED" in log and "Receiving" not in log
    nodes = {int(n["node-id"]): n for n in federation.flwr("supernode", "ls", "sites")["nodes"]}
    assert nodes[federation.node_ids["site-c"]]["status"] == "registered"  # never online


def zombies(fed: Federation, site: str) -> list[int]:
    """Finished processes below a site's SuperNode that nobody has reaped (``<defunct>``)."""
    out = []
    for pid in process_tree(fed.procs[site].pid):
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                out.append(pid)
        except FileNotFoundError:
            pass
    return out


# SCAFFOLD keeps state on both sides; every strategy resumes exactly in process (test_reliability.py)
@pytest.mark.parametrize("strategy", ["scaffold"])
def test_resume_after_superlink_kill_is_exact(federation, tmp_path, strategy):
    """Both sites train every round. Round 1 is recorded (and checkpointed); in round 2 site A is
    frozen before it answers while site B trains, commits its round-2 state and answers; then the
    SuperLink, its ServerApp and everything they started are killed (SIGKILL). The SuperLink is
    restarted on its database, the sites reconnect on their own, and the run resumed from its
    folder asks each site for its state of round 1: it ends bit for bit as an in-process run that
    was never interrupted, in the server's state and in both sites' client state."""
    overrides = {"strategy": strategy, "fraction-train": 1.0, "num-server-rounds": 2, "results-dir": str(tmp_path),
                 "run-name": strategy, "keep-client-state": True}
    federation.submit(run_config(overrides))
    results = tmp_path / strategy / "rounds.json"
    deadline = time.time() + 300
    while len(rounds(results)) < 2:  # rounds 0 and 1
        assert time.time() < deadline, federation.log("superlink")[-3000:]
        time.sleep(0.1)
    site_a = process_tree(federation.procs["site-a"].pid)
    signal_all(site_a, signal.SIGSTOP)  # round 2's ClientApp takes seconds to start: A has not answered
    try:
        run_key = json.loads(results.read_text())["run-key"]
        b_round_2 = federation.root / "state" / "site-b" / f"{run_key}-{strategy}-p1-r2.pt"
        while not b_round_2.exists():  # B has trained round 2
            assert time.time() < deadline, federation.log("site-b")[-3000:]
            time.sleep(0.05)
        signal_all(process_tree(federation.procs.pop("superlink").pid), signal.SIGKILL)
    finally:
        signal_all(site_a, signal.SIGCONT)
        if "superlink" not in federation.procs:  # restarted on its database, also for the tests after this one
            federation.start_superlink()
    assert [r["round"] for r in rounds(results)] == [0, 1]
    assert torch.load(tmp_path / strategy / "checkpoint.pt", weights_only=False)["round"] == 1

    run_id = federation.submit(run_config({**overrides, "resume-from": str(tmp_path / strategy)}))
    status = federation.wait_finished(run_id, results, 3)
    assert status["status"] == "finished:completed", (status, federation.log("superlink")[-3000:])
    # Flower's SuperExec reaps a finished ClientApp process when it starts the next one: after the run,
    # the last one (the end-of-run message's) may wait, and nothing piles up; at site A also the killed
    # run's frozen ClientApp where, on a loaded machine, it ended after the resumed run's last one started
    assert [len(zombies(federation, site)) <= (2 if site == "site-a" else 1) for site in SITES] == [True] * len(SITES)

    cfg = parse_run_config({**BASE, **overrides, "results-dir": str(tmp_path / "reference")})
    grid = InProcessGrid(app, 2, cfg.as_dict())
    reference = run_local(cfg.as_dict(), grid=grid)
    rows = rounds(results)
    assert [r["round"] for r in rows] == [0, 1, 2]
    keys = ("train-loss", "central-loss", "central-accuracy", "replies")
    assert [{k: r.get(k) for k in keys} for r in rows] == [{k: r.get(k) for k in keys} for r in reference.history]
    saved = torch.load(tmp_path / strategy / "checkpoint.pt", weights_only=False)["attrs"]
    for name in ("global_state", "control" if strategy == "scaffold" else "dual"):
        want = getattr(reference, name)
        assert all(torch.equal(saved[name][k], v) for k, v in want.items()), name
    for site, pid in SITES.items():
        got = torch.load(latest_state(federation.root / "state" / site, f"{run_key}-{strategy}-p{pid}"), weights_only=True)
        want = load_state(grid.contexts[reference.clients[pid].node_id], cfg)
        assert got.keys() == want.keys() and all(torch.equal(got[n][k], v) for n in want for k, v in want[n].items())
