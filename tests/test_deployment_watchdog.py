"""A site's ClientApp processes end soon after the SuperLink is stopped mid-run
(fedapp/runtime/watchdog.py): on loopback, through the documented recipe's proxy, and in process."""

import http.server
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from fedapp.runtime import watchdog
from fedapp.runtime.launch import process_tree
from test_deployment import Federation, alive, free_port, run_config, signal_all
from test_deployment_proxy import NGINX, start_behind_proxy

SITES = ("site-0", "site-1")


def clientapps(fed: Federation) -> list[int]:
    found = []
    for site in SITES:
        for pid in process_tree(fed.procs[site].pid):
            try:
                if "flwr-clientapp" in open(f"/proc/{pid}/cmdline").read() and alive(pid):
                    found.append(pid)
            except FileNotFoundError:
                pass
    return found


@pytest.mark.slow
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (scripts/setup.sh installs it)")
def test_clientapps_end_after_superlink_stop(tmp_path):
    """Both sites stall in training (sleeping past round-timeout, 600 s, without the watchdog);
    the SuperLink is stopped, its proxy answers 502 from then on, every ClientApp ends with
    SuperLinkLost (the seconds each took are printed), and the SuperNodes stay up to reconnect later."""
    fed = Federation(tmp_path)
    public = free_port()
    try:
        start_behind_proxy(fed, tmp_path, public, SITES)
        for site in SITES:
            fed.flwr("supernode", "register", str(fed.creds / f"{site}.pub"), "sites")
        for pid, site in enumerate(SITES):
            fed.start(site, ["flower-supernode", "--superlink", f"127.0.0.1:{public}",
                             "--root-certificates", str(fed.creds / "ca.crt"),
                             "--auth-supernode-private-key", str(fed.creds / site), "--port", str(free_port()),
                             "--node-config", f"partition-id={pid} num-partitions=2"])
        fed.submit(run_config({"strategy": "fedavg", "fraction-train": 1.0, "num-server-rounds": 1,
                               "fault-fraction": 1.0, "fault-kind": "stall", "round-timeout": 600,
                               "results-dir": str(tmp_path / "results"), "run-name": "stalled"}))
        for site in SITES:  # the training message's ClientApp watches the SuperLink (after discovery's)
            fed.wait_for(site, "Receiving: train message", timeout=240)
            deadline = time.time() + 240
            while "Watching the SuperLink" not in fed.log(site).split("Receiving: train message")[1]:
                assert time.time() < deadline, fed.log(site)[-3000:]
                time.sleep(0.2)
        running = clientapps(fed)
        assert len(running) == len(SITES)

        stopped = time.time()
        threading.Thread(target=fed.stop, args=("superlink",), daemon=True).start()  # SIGTERM, SIGKILL after 20 s
        ended = {}
        # waited for up to half the round-timeout: what ends them is the watchdog (the log line below)
        while len(ended) < len(running) and time.time() - stopped < 300:
            ended.update({p: time.time() - stopped for p in running if p not in ended and not alive(p)})
            time.sleep(0.2)
        print(f"ClientApps ended {sorted(round(t, 1) for t in ended.values())} s after the SuperLink's SIGTERM")
        assert len(ended) == len(running), ended
        for site in SITES:
            assert "SuperLinkLost: no answer from the SuperLink" in fed.log(site)
            assert fed.procs[site].poll() is None  # the SuperNode waits for the SuperLink to come back
    finally:
        for name in list(fed.procs):
            fed.stop(name)


def test_the_superlink_address_is_the_supernodes(tmp_path):
    """Read from the nearest flower-supernode ancestor's command line, with Flower's defaults
    and the CA path relative to that process's working directory."""
    child = "import subprocess; subprocess.run(['sleep', '60'])"
    parent = subprocess.Popen([sys.executable, "-c", child, "bin/flower-supernode", "--superlink",
                               "link.example.org:9092", "--root-certificates", "creds/ca.crt",
                               "--node-config", "partition-id=0"], cwd=tmp_path)
    try:
        deadline = time.time() + 30
        while len(tree := process_tree(parent.pid)) < 2:
            assert time.time() < deadline
            time.sleep(0.05)
        assert watchdog.supernode_superlink(tree[-1]) == ("https://link.example.org:9092/health",
                                                          str(tmp_path / "creds" / "ca.crt"))
        assert watchdog.supernode_superlink(parent.pid) is None  # not below a SuperNode
    finally:
        signal_all(process_tree(parent.pid), signal.SIGKILL)
        parent.wait()


def test_a_lost_superlink_interrupts_the_message(monkeypatch):
    """In process: the mod raises SuperLinkLost in the handling thread ``grace`` s after the
    SuperLink stopped answering (here: nothing listens), even from a sleep; an answering one
    (502 aside) never interrupts, and a late signal is ignored."""
    from flwr.app import Context, RecordDict

    context = Context(run_id=1, node_id=1, node_config={"superlink-grace": 1.0}, state=RecordDict(), run_config={})
    msg = None  # the mod passes the message on untouched
    monkeypatch.setattr(watchdog, "PROBE_INTERVAL", 0.2)
    monkeypatch.setattr(watchdog, "_target", [(f"http://127.0.0.1:{free_port()}/health", False)])
    slept = []  # the handler's 60 s sleep, had it ended

    def handler(m, c):
        time.sleep(60)
        slept.append(True)

    with pytest.raises(watchdog.SuperLinkLost, match="no answer from the SuperLink") as lost:
        watchdog.superlink_watchdog_mod(msg, context, handler)
    assert slept == []  # interrupted in the sleep, not after it
    silence = re.search(r"\) for (\d+) s: ", str(lost.value))
    assert silence and int(silence[1]) >= 1  # not before the grace of silence
    signal.pthread_kill(threading.main_thread().ident, watchdog.PROBE_SIGNAL)  # disarmed: ignored
    time.sleep(0.1)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        monkeypatch.setattr(watchdog, "_target", [(f"http://127.0.0.1:{server.server_port}/health", False)])
        assert watchdog.superlink_watchdog_mod(msg, context, lambda m, c: time.sleep(2.0) or "reply") == "reply"
        server.shutdown()
