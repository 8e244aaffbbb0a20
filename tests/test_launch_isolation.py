"""Two launches from two checkouts at once, with something else answering on the port the
launcher once used by default (39191): each runs on a SuperLink of its own and writes only in
its own checkout; the one whose run learns nothing exits 1."""

import http.server
import json
import os
import re
import subprocess
import sys
import threading

import pytest

from fedapp.runtime.launch import launched_processes
from tests.conftest import app_checkout as checkout


class Foreign(http.server.BaseHTTPRequestHandler):
    """Anything that answers (a SuperLink of someone else): every request is counted."""

    requests: list[str] = []

    def do_GET(self):
        Foreign.requests.append(self.path)
        self.send_response(200)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_launches_are_isolated(tmp_path):
    a, b = checkout(tmp_path / "a"), checkout(tmp_path / "b")
    try:
        foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 39191), Foreign)
    except OSError:  # something answers there already: the launches must leave it alone all the same
        foreign = None
    else:
        threading.Thread(target=foreign.serve_forever, daemon=True).start()
    common = "num-clients=2 local-steps=2 fraction-evaluate=0.0 run-name='iso'"
    runs = {a: f"{common} num-server-rounds=1",
            # every training reply non-finite, so dropped: a run that learns nothing
            b: f"{common} num-server-rounds=3 fault-fraction=1.0 fault-kind='nan'"}
    try:
        procs = {root: subprocess.Popen([sys.executable, "-m", "fedapp.runtime.launch", "--timeout", "300",
                                         "--run-config", rc],
                                        cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for root, rc in runs.items()}
        out = {root: proc.communicate(timeout=420)[0] for root, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        if foreign is not None:
            foreign.shutdown()
    assert procs[a].returncode == 0, out[a][-3000:]
    assert re.fullmatch(rf"run \d+: finished:completed in [\d.]+ s; results in {a / 'results' / 'iso'}",
                        out[a].splitlines()[-1])
    assert procs[b].returncode == 1, out[b][-3000:]
    assert "round 1: no valid training reply in its first round" in out[b]
    assert re.fullmatch(rf"run \d+: finished:failed in [\d.]+ s; results in {b / 'results' / 'iso'}",
                        out[b].splitlines()[-1])
    # each wrote in its own checkout only, one folder each
    for root, rounds, fraction in ((a, [0, 1], 0.0), (b, [0], 1.0)):
        assert [p.name for p in (root / "results").iterdir()] == ["iso"]
        doc = json.loads((root / "results" / "iso" / "rounds.json").read_text())
        assert [r["round"] for r in doc["rounds"]] == rounds and doc["config"]["fault-fraction"] == fraction
    assert foreign is None or Foreign.requests == []  # never asked, let alone submitted to
    assert launched_processes(a / ".flwr-home") == [] and launched_processes(b / ".flwr-home") == []
