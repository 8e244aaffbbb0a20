"""The deployment recipe of docs/deployment.md, on loopback: the SuperLink bound to the
loopback, nginx (scripts/fleet_proxy.py) as its only public address, forwarding the Fleet API
alone. Three registered sites train through the proxy while a stranger who reaches that
address, with the CA certificate every site gets, can neither list runs nor register a node,
and a raw HTTPS call to the Control API is refused."""

import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from test_deployment import ROOT, Federation, free_port, rounds, run_config

NGINX = shutil.which("nginx") or shutil.which("/usr/sbin/nginx")
SITES = ("site-0", "site-1", "site-2")
pytestmark = [pytest.mark.skipif(NGINX is None, reason="nginx is not installed (scripts/setup.sh installs it)"),
              pytest.mark.slow]


def wait_listening(port: int, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.time() < deadline, f"nothing listens on {port}"
            time.sleep(0.1)


def start_behind_proxy(fed: Federation, tmp_path, public: int, names, superlink_args=()) -> None:
    """Credentials for ``names``, a TLS SuperLink with SuperNode authentication on loopback, and the
    Fleet-only proxy (scripts/fleet_proxy.py) in front of it on port ``public``; returns once both listen."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_credentials.py"), str(fed.creds), *names],
                   check=True, capture_output=True)
    fed.start("superlink", [
        "flower-superlink", "--ssl-ca-certfile", str(fed.creds / "ca.crt"),
        "--ssl-certfile", str(fed.creds / "server.pem"), "--ssl-keyfile", str(fed.creds / "server.key"),
        "--enable-supernode-auth", *superlink_args, "--host", "127.0.0.1", "--port", str(fed.port)])
    (tmp_path / "proxy").mkdir()
    fed.start("proxy", [sys.executable, str(ROOT / "scripts" / "fleet_proxy.py"), "--listen",
                        f"127.0.0.1:{public}", "--superlink", f"127.0.0.1:{fed.port}", "--creds",
                        str(fed.creds), "--workdir", str(tmp_path / "proxy")])
    fed.wait_for("superlink", "Uvicorn running on https://")
    wait_listening(public)


def test_stranger_cannot_reach_the_control_api(tmp_path):
    fed = Federation(tmp_path)
    public = free_port()
    stranger_home = tmp_path / "stranger"
    stranger_home.mkdir()
    (stranger_home / "config.toml").write_text(
        f'[superlink]\ndefault = "public"\n\n[superlink.public]\naddress = "127.0.0.1:{public}"\n'
        f'root-certificates = "{fed.creds / "ca.crt"}"\n')
    try:
        start_behind_proxy(fed, tmp_path, public, [*SITES, "stranger"], ["--disable-runtime-dependency-installation"])
        with ThreadPoolExecutor(len(SITES)) as pool:  # the operator, on the SuperLink's machine: its loopback
            list(pool.map(lambda s: fed.flwr("supernode", "register", str(fed.creds / f"{s}.pub"), "sites"), SITES))
        for pid, site in enumerate(SITES):
            fed.start(site, ["flower-supernode", "--superlink", f"127.0.0.1:{public}",
                             "--root-certificates", str(fed.creds / "ca.crt"),
                             "--auth-supernode-private-key", str(fed.creds / site), "--port", str(free_port()),
                             "--node-config", f"partition-id={pid} num-partitions=3"])
        results = tmp_path / "results"
        run_id = fed.submit(run_config({"strategy": "fedavg", "num-clients": 3, "fraction-train": 1.0,
                                        "num-server-rounds": 1, "results-dir": str(results), "run-name": "proxied"}))

        env = {**fed.env(stranger_home), "FLWR_HOME": str(stranger_home)}

        def stranger(*args):
            return subprocess.run(["flwr", *args, "--format", "json"], env=env, cwd=tmp_path, text=True,
                                  capture_output=True, timeout=120)

        listed = stranger("ls", "public")
        registered = stranger("supernode", "register", str(fed.creds / "stranger.pub"), "public")
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # curl -k
        codes = {}
        for path in ("/v1/control/list-runs", "/v1/control/register-node", "/v1/control/stop-run"):
            request = urllib.request.Request(f"https://127.0.0.1:{public}{path}", data=b"", method="POST")
            try:
                codes[path] = urllib.request.urlopen(request, context=insecure, timeout=10).status
            except urllib.error.HTTPError as err:
                codes[path] = err.code

        status = fed.wait_finished(run_id, results / "proxied" / "rounds.json", 2)
        assert status["status"] == "finished:completed", status
        assert [r["replies"] for r in rounds(results / "proxied" / "rounds.json")[1:]] == [3]
        assert '"success": true' not in listed.stdout and "proxied" not in listed.stdout, listed.stdout
        assert '"success": true' not in registered.stdout, registered.stdout
        assert set(codes.values()) == {403}, codes
        nodes = fed.flwr("supernode", "ls", "sites")["nodes"]
        assert len(nodes) == 3 and all(n["status"] == "online" for n in nodes)
    finally:
        for name in list(fed.procs):
            fed.stop(name)
