"""The commands of docs/deployment.md that need no running federation, run as written there,
and the doc's commands as scripts/check_deployment_doc.py reads them (that script runs them all
on a loopback federation, in minutes: not part of the suite)."""

import os
import re
import subprocess
import sys
from pathlib import Path

from cryptography import x509

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from check_deployment_doc import DOC, SKIPPED, blocks, command, commands  # noqa: E402


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


def test_every_command_of_the_doc_is_in_a_code_block_the_check_reads():
    """No command hides in an indented block the check would not see; each skipped one is
    said to be skipped in the doc (the check itself fails on any other that it does not run)."""
    text = DOC.read_text()
    outside = re.sub(r"^( *)```.*?^\1```$", "", text, flags=re.M | re.S)
    assert not re.findall(r"^ {4,}\S", outside, re.M), "a command outside a fenced block"
    assert {lang for lang, _ in blocks(text)} == {"sh", "toml"}
    cmds = commands(text)
    assert command("until flower-supernode").endswith("done") and command("flower-superlink").count("\n") == 3
    skipped = [c for c in cmds if any(c.startswith(s) for s in SKIPPED)]
    assert [c.split()[0] for c in skipped] == ["apt-get", "pip", "ssh", "ray", "ray", "RAY_ADDRESS=<head>:6379"]
    assert "not run by the check" in text and "the check does not install packages" in text
