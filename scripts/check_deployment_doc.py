"""Run every command of docs/deployment.md verbatim on loopback and check its documented outcome.

    python scripts/check_deployment_doc.py [--workdir DIR]

The commands are read from the doc's ```sh blocks (a ```toml block is written as the file it
shows), so the doc and this check cannot drift: a command the check neither runs nor skips
fails it. Only the placeholders the doc names are replaced (``superlink.example.org``, the
ports 9092/9093/9094, paths under /var/lib/, /data/, /srv/, /path/to/, ``<node-id>``,
``<id>``); commands that need other machines or root are listed as skipped, with the reason
the doc gives. A whole federation runs on this machine: a SuperLink with TLS, authentication
and a database, its nginx proxy, two sites with their own image folders, three runs, a site
crashed and restarted by the documented loop. Minutes; exit status 1 at the first command
whose outcome differs from the doc's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedapp.runtime.launch import process_tree

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deployment.md"
#: commands (by their start) the check cannot run on one machine, and why
SKIPPED = {
    "apt-get install nginx": "installs a system package (root and the network); the check needs nginx installed",
    "pip install -e .": "installs into the Python environment; the check runs in such an environment",
    "ssh -N -L": "an SSH tunnel needs a second machine with an SSH server",
    "ray start": "a Ray cluster needs several machines",
    "RAY_ADDRESS=<head>": "needs the Ray cluster of the commands above",
}


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced code block, indentation (in list items) removed."""
    found = []
    for m in re.finditer(r"^( *)```(\w+)\n(.*?)^\1```$", text, re.M | re.S):
        indent = len(m.group(1))
        found.append((m.group(2), "".join(line[indent:] for line in m.group(3).splitlines(True))))
    return found


def commands(text: str) -> list[str]:
    """Every shell command of the doc: continuation lines and ``until ... done`` loops joined."""
    cmds = []
    for lang, body in blocks(text):
        if lang != "sh":
            continue
        current = ""
        for line in body.splitlines(True):
            current += line
            if current.rstrip().endswith("\\") or (current.startswith("until ") and line.strip() != "done"):
                continue
            cmds.append(current.rstrip("\n"))
            current = ""
    return cmds


def command(prefix: str, text: str | None = None) -> str:
    """The one documented command starting with ``prefix``."""
    [cmd] = [c for c in commands(DOC.read_text() if text is None else text) if c.startswith(prefix)]
    return cmd


def toml_block(first_line: str) -> str:
    [body] = [b for lang, b in blocks(DOC.read_text()) if lang == "toml" and b.startswith(first_line)]
    return body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Check:
    """The federation's processes, the placeholders' values and the report."""

    def __init__(self, work: Path):
        self.work = work
        self.ports = {p: str(free_port()) for p in ("9092", "9093", "9094")}
        self.procs: dict[str, subprocess.Popen] = {}
        self.used: set[str] = set()
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                    "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "OMP_NUM_THREADS": "1",
                    "FEDAPP_CACHE": str(work / "cache")}

    def local(self, cmd: str, **values: str) -> str:
        """``cmd`` with the doc's placeholders replaced."""
        cmd = cmd.replace("superlink.example.org", "localhost")
        cmd = re.sub(r"\b(9092|9093|9094)\b", lambda m: self.ports[m.group(1)], cmd)
        for prefix in ("/var/lib/", "/data/", "/srv/", "/path/to/"):
            cmd = re.sub(rf"(?<![\w.]){re.escape(prefix)}", f"{self.work}{prefix}", cmd)
        for key, value in values.items():
            cmd = cmd.replace(f"<{key}>", value)
        return cmd

    def home(self, name: str) -> dict:
        (self.work / name / "flwr-home").mkdir(parents=True, exist_ok=True)
        return {**self.env, "FLWR_HOME": str(self.work / name / "flwr-home")}

    def run(self, doc_cmd: str, cwd: Path, home: str = "cli", timeout: float = 300, **values) -> str:
        """Run ``doc_cmd`` to its end; its standard output, or exit with all it said when it fails."""
        self.used.add(doc_cmd)
        cmd = self.local(doc_cmd, **values)
        start = time.time()
        out = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=self.home(home), capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode != 0:
            self.fail(doc_cmd, f"exit status {out.returncode}:\n{(out.stdout + out.stderr)[-3000:]}")
        print(f"ran      {doc_cmd.splitlines()[0][:100]}  ({time.time() - start:.0f} s)", flush=True)
        return out.stdout

    def start(self, name: str, doc_cmd: str, cwd: Path, home: str | None = None, **values) -> None:
        """Start ``doc_cmd`` in the background, its output in ``work/name.log``."""
        self.used.add(doc_cmd)
        with open(self.work / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(["bash", "-c", self.local(doc_cmd, **values)], cwd=cwd,
                                                env=self.home(home or name), stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        print(f"started  {doc_cmd.splitlines()[0][:100]}  ({name})", flush=True)

    def log(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")

    def wait(self, what: str, ok, timeout: float = 300) -> None:
        deadline = time.time() + timeout
        while not ok():
            if time.time() > deadline:
                self.fail(what, "timed out")
            time.sleep(0.5)

    def wait_log(self, name: str, text: str, count: int = 1, timeout: float = 300) -> None:
        def seen():
            if self.procs[name].poll() is not None:
                self.fail(name, f"exited ({self.procs[name].returncode}):\n{self.log(name)[-3000:]}")
            return self.log(name).count(text) >= count
        self.wait(f"{name} logging {text!r}", seen, timeout)

    def stop(self, name: str, sig: int = signal.SIGTERM, grace: float = 20) -> None:
        proc = self.procs.pop(name)
        pids = process_tree(proc.pid) if proc.poll() is None else []
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()

    def fail(self, what: str, why: str) -> None:
        print(f"FAILED   {what}\n{why}", flush=True)
        raise SystemExit(1)

    def flwr_json(self, *args: str) -> dict:
        """The check's own look at the federation (not a doc command)."""
        out = subprocess.run(["flwr", *args, "--format", "json"], cwd=self.work, env=self.home("cli"),
                             capture_output=True, text=True, timeout=300)
        return json.loads(out.stdout)


def image_tree(root: Path, per_class: int, seed: int) -> None:
    """A site's own data: 8x8 RGB images of two labels, train and test."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, n in (("train", per_class), ("test", 2)):
        for label in ("cat", "dog"):
            (root / split / label).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / split / label / f"{i}.png")


def rounds(path: Path) -> list:
    try:
        return json.loads(path.read_text())["rounds"]
    except (FileNotFoundError, ValueError):
        return []


def check(c: Check) -> None:
    text = DOC.read_text()
    link, w = c.work / "link", c.work  # the SuperLink's machine: a checkout with its environment
    link.mkdir()
    (link / "scripts").symlink_to(ROOT / "scripts")
    (link / ".venv").symlink_to(Path(sys.prefix))

    # 1. credentials (the two lines of the block run in one shell)
    activate, creds_cmd = command(". .venv/bin/activate"), command("python scripts/make_credentials.py")
    c.run(f"{activate}\n{creds_cmd}", link)
    c.used |= {activate, creds_cmd}
    creds = link / "creds"
    made = sorted(p.name for p in creds.iterdir())
    if made != ["ca.crt", "ca.key", "server.key", "server.pem", "site-a", "site-a.pub", "site-b", "site-b.pub"]:
        c.fail(creds_cmd, f"made {made}")
    (w / "keygen").mkdir()
    keygen = command("ssh-keygen")
    c.run(keygen, w / "keygen")
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    key = load_ssh_public_key((w / "keygen" / "site-a.pub").read_bytes())
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp384r1":
        c.fail(keygen, f"made a {type(key).__name__}, not an ECDSA key on NIST P-384")

    # 2. the SuperLink on the loopback, nginx in front
    (w / "var" / "lib" / "flwr").mkdir(parents=True)
    c.start("superlink", command("flower-superlink"), link)
    c.wait_log("superlink", "Uvicorn running on https://")
    c.start("proxy", command("python scripts/fleet_proxy.py"), link)
    c.wait("the proxy listening", lambda: socket.socket().connect_ex(("127.0.0.1", int(c.ports["9092"]))) == 0, 60)
    curl = command("curl -k")
    out = c.run(curl, w)
    if "403 Forbidden" not in out:
        c.fail(curl, f"not refused:\n{out}")

    # 3. the experimenter's connection (here on the SuperLink's machine)
    (Path(c.home("cli")["FLWR_HOME"]) / "config.toml").write_text(c.local(toml_block("[superlink]")))
    (w / "path" / "to").mkdir(parents=True)
    (w / "path" / "to" / "creds").symlink_to(creds)

    # 4. registering the sites
    node_ids = {}
    for site in ("site-a", "site-b"):
        doc_cmd = command(f"flwr supernode register creds/{site}.pub")
        out = c.run(doc_cmd, link)
        if not (m := re.search(r"\b(\d{6,})\b", out)):
            c.fail(doc_cmd, f"no node id in:\n{out}")
        node_ids[site] = m.group(1)
    listed = c.run(command("flwr supernode ls sites"), link)
    registered = {n["node-id"]: n["status"] for n in c.flwr_json("supernode", "ls", "sites")["nodes"]}
    if registered != {i: "registered" for i in node_ids.values()} or not all(i in listed for i in node_ids.values()):
        c.fail("flwr supernode ls sites", f"lists {listed}")

    # 5. the sites, each with its key, the CA certificate and its own images
    site_cmd = command("flower-supernode")
    for site, pid in (("site-a", 0), ("site-b", 1)):
        (w / site).mkdir()
        for name in ("ca.crt", site):
            shutil.copy(creds / name, w / site / name)
        image_tree(w / "data" / site, 6 + 2 * pid, seed=pid)
    image_tree(w / "srv" / "data", 2, seed=9)  # the ServerApp's held-out set
    c.start("site-a", site_cmd, w / "site-a")
    site_b = site_cmd.replace("site-a", "site-b").replace("partition-id=0", "partition-id=1")
    c.start("site-b", site_b.replace("--port 9094", f"--port {free_port()}"), w / "site-b")
    for site in ("site-a", "site-b"):
        c.wait_log(site, "SuperNode ID:")

    # 6. runs: the first trains a round, is watched and stopped; the other two are started and stopped
    app = w / "app"  # the app as the experimenter has it: the repository's files
    for f in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split():
        if (ROOT / f).is_file():
            (app / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / f, app / f)
    (app / "sites.toml").write_text(c.local(toml_block('strategy = "scaffold"')))
    run_cmds = [cmd for cmd in commands(text) if cmd.startswith("flwr run . sites")]

    def submitted(doc_cmd: str) -> str:
        out = c.run(doc_cmd, app)
        m = re.search(r"Successfully started run (\d+)", out)
        if not m:
            c.fail(doc_cmd, f"no run id in:\n{out}")
        return m.group(1)

    def status(run_id: str) -> str:
        return c.flwr_json("ls", "sites", "--run-id", run_id)["runs"][0]["status"]

    first = submitted(run_cmds[0])
    results = w / "srv" / "results" / "fedavg" / "rounds.json"
    asked = [time.time()]

    def trained() -> bool:  # the run's status is asked every 30 s, in case it failed
        if len(rounds(results)) >= 2:
            return True
        if time.time() - asked[0] > 30:
            asked[0] = time.time()
            if (now := status(first)).startswith("finished"):
                c.fail(run_cmds[0], f"the run is {now} before its round 1 (`flwr log {first} sites` says why)")
        return False

    c.wait("round 1 of the fedavg run in /srv/results/fedavg/rounds.json", trained, 900)
    if rounds(results)[1]["replies"] != 2:
        c.fail(run_cmds[0], f"round 1: {rounds(results)[1]}")
    if first not in c.run(command("flwr ls sites  "), w):
        c.fail("flwr ls sites", "does not list the run")
    listing = json.loads(c.run(command("flwr ls sites --run-id"), w, id=first))
    if listing["runs"][0]["status"] != "running":
        c.fail("flwr ls sites --run-id", f"{listing}")
    c.start("log", command("flwr log"), w, home="cli", id=first)
    c.wait_log("log", "results:", timeout=120)
    c.run(command("flwr stop"), w, id=first)
    c.wait("the fedavg run stopped", lambda: status(first) == "finished:stopped", 120)
    c.wait("flwr log --stream ending with the run", lambda: c.procs["log"].poll() is not None, 120)
    del c.procs["log"]

    # a crashed site (SIGKILL) restarted at once by the documented loop: refused, then back
    loop = command("until flower-supernode")
    c.stop("site-a", signal.SIGKILL, grace=0)
    crashed = time.time()
    c.start("site-a", loop, w / "site-a")
    c.wait_log("site-a", "Failed to activate SuperNode", timeout=120)
    c.wait_log("site-a", "SuperNode ID:", count=2, timeout=240)
    print(f"         site A, killed and restarted by the loop at once: refused "
          f"{c.log('site-a').count('Failed to activate SuperNode')} time(s), back after {time.time() - crashed:.0f} s")

    for doc_cmd in run_cmds[1:]:
        run_id = submitted(doc_cmd)
        c.wait(f"run {run_id} running", lambda: status(run_id) == "running", 300)
        c.run(command("flwr stop"), w, id=run_id)
        c.wait(f"run {run_id} stopped", lambda: status(run_id) == "finished:stopped", 120)

    # revoking site B
    c.run(command("flwr supernode unregister"), link, **{"node-id": node_ids["site-b"]})
    left = {n["node-id"]: n["status"] for n in c.flwr_json("supernode", "ls", "sites")["nodes"]}
    if left.get(node_ids["site-b"], "unregistered") != "unregistered":
        c.fail("flwr supernode unregister", f"site B is still {left[node_ids['site-b']]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, help="keep the federation's files and logs here (default: a temp dir)")
    a = p.parse_args(argv)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="deployment-doc-"))
    work.mkdir(parents=True, exist_ok=True)
    c = Check(work.resolve())
    text = DOC.read_text()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # either way the federation is stopped
    try:
        check(c)
    finally:
        for name in reversed(list(c.procs)):
            c.stop(name)
    for cmd in commands(text):
        reason = next((r for start, r in SKIPPED.items() if cmd.startswith(start)), None)
        if reason:
            print(f"skipped  {cmd.splitlines()[0][:100]}: {reason}")
        elif cmd not in c.used:
            c.fail(cmd.splitlines()[0], "in docs/deployment.md but neither run nor skipped by this check")
    print(f"every command of {DOC.relative_to(ROOT)} ran as documented (files and logs: {work})")
    if a.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
