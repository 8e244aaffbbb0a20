"""The commands of docs/deployment.md that need no running federation, run as written there
(the federation's own commands run in test_deployment.py and test_deployment_proxy.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

from cryptography import x509

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "deployment.md").read_text()


def command(prefix: str) -> str:
    """The documented command starting with ``prefix``, continuation lines joined."""
    match = re.search(rf"^    ({re.escape(prefix)}.*?)(?<!\\)\n", DOC, re.M | re.S)
    assert match, prefix
    return re.sub(r"\\\n\s*", "", match.group(1))


def shell(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    (cwd / "scripts").exists() or (cwd / "scripts").symlink_to(ROOT / "scripts")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_the_credentials_command_runs_as_written(tmp_path):
    out = shell(command("python scripts/make_credentials.py"), tmp_path)
    assert out.returncode == 0, out.stderr
    creds = tmp_path / "creds"
    assert sorted(p.name for p in creds.iterdir()) == ["ca.crt", "ca.key", "server.key", "server.pem", "site-a",
                                                       "site-a.pub", "site-b", "site-b.pub"]
    cert = x509.load_pem_x509_certificate((creds / "server.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "superlink.example.org" in names and "localhost" in names
    assert "--host 127.0.0.1" in out.stdout and "fleet_proxy.py" in out.stdout  # it prints the recipe


def test_the_proxy_configuration_forwards_only_the_fleet_api(tmp_path):
    shell(command("python scripts/make_credentials.py"), tmp_path)
    out = shell(command("python scripts/fleet_proxy.py") + " --print", tmp_path)
    assert out.returncode == 0, out.stderr
    locations = re.findall(r"location (.+?) \{", out.stdout)
    assert locations == ["/v1/fleet/", "= /health", "/"]
    assert "listen 0.0.0.0:9092 ssl;" in out.stdout and "proxy_pass https://127.0.0.1:9093;" in out.stdout
    assert "location / { return 403; }" in out.stdout
    assert "--host 127.0.0.1 --port 9093" in command("flower-superlink")
