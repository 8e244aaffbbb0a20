"""Run nginx as the SuperLink's public face: TLS on the public address, only the Fleet API
(``/v1/fleet/``, what SuperNodes call) and its ``/health`` (which a site's ClientApps watch:
fedapp/runtime/watchdog.py) forwarded to a SuperLink bound to the loopback; every other path (the
Control API of ``flwr run``/``ls``/``supernode register``, the runtime API) answers 403. Flower 1.41 serves all its APIs on one port, so this is what keeps strangers
who can reach the SuperLink's machine out of the Control API (docs/deployment.md).

    python scripts/fleet_proxy.py --listen 0.0.0.0:9092 --superlink 127.0.0.1:9093 \\
        --creds creds --workdir /var/lib/fedapp/fleet-proxy

runs nginx in the foreground (stop it with SIGTERM or Ctrl-C) with the configuration it
writes to ``workdir/nginx.conf``; ``--print`` only prints that configuration. The proxy
presents the SuperLink's certificate (``creds/server.pem``), so SuperNodes keep their
``--root-certificates ca.crt``, and checks the SuperLink's certificate against ``ca.crt``.

A request body larger than ``--max-body-mb`` (default 8 MiB) is answered 413 from its
Content-Length, before any of it is forwarded. Flower 1.42 sends a reply up as one request per
object, and splits every array into chunks of at most 5 MiB (``FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE``,
5242880 bytes, the default), so a SuperNode's largest request is one chunk whatever the model's
size; only a config or metric record of more than the limit (fedapp's clients send a few dozen
numbers) cannot pass.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

CONFIG = """\
daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {work}/access.log;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    client_max_body_size {max_body}m;  # one request carries one object: an array chunk is at most 5 MiB
    server {{
        listen {listen} ssl;
        ssl_certificate {creds}/server.pem;
        ssl_certificate_key {creds}/server.key;
        location /v1/fleet/ {{
            proxy_pass https://{superlink};
            proxy_http_version 1.1;
            proxy_ssl_trusted_certificate {creds}/ca.crt;
            proxy_ssl_verify on;
            proxy_ssl_name {upstream_name};
            proxy_request_buffering off;
            proxy_buffering off;
            proxy_read_timeout 600s;
            proxy_send_timeout 600s;
        }}
        location = /health {{           # liveness only (200, nothing else); 502 when the SuperLink is gone
            proxy_pass https://{superlink};
            proxy_ssl_trusted_certificate {creds}/ca.crt;
            proxy_ssl_verify on;
            proxy_ssl_name {upstream_name};
        }}
        location / {{ return 403; }}  # Control API, runtime API, anything else
    }}
}}
"""


def config(listen: str, superlink: str, creds: Path, work: Path, max_body_mb: int = 8) -> str:
    host = superlink.rsplit(":", 1)[0].strip("[]")
    return CONFIG.format(listen=listen, superlink=superlink, creds=creds.resolve(), work=work.resolve(),
                         upstream_name="localhost" if host in ("127.0.0.1", "::1") else host, max_body=max_body_mb)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", required=True, help="public address, e.g. 0.0.0.0:9092")
    p.add_argument("--superlink", required=True, help="the SuperLink's --host:--port, e.g. 127.0.0.1:9093")
    p.add_argument("--creds", required=True, type=Path, help="folder with ca.crt, server.pem, server.key")
    p.add_argument("--workdir", required=True, type=Path, help="nginx's configuration, logs and temporary files")
    p.add_argument("--max-body-mb", type=int, default=8,
                   help="largest request body in MiB (default 8: Flower sends arrays in chunks of 5 MiB)")
    p.add_argument("--print", action="store_true", help="print the configuration and exit")
    a = p.parse_args(argv)
    if a.max_body_mb < 6:  # a chunk and its request's framing must pass
        sys.exit(f"fleet_proxy: --max-body-mb {a.max_body_mb}: must be at least 6 (Flower's 5 MiB array chunks)")
    for name in ("ca.crt", "server.pem", "server.key"):
        if not (a.creds / name).is_file():
            sys.exit(f"fleet_proxy: --creds {a.creds}: no {name} there (scripts/make_credentials.py makes them)")
    text = config(a.listen, a.superlink, a.creds, a.workdir, a.max_body_mb)
    if a.print:
        print(text, end="")
        return
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        sys.exit("fleet_proxy: nginx is not installed (Debian: apt-get install nginx; scripts/setup.sh does it)")
    a.workdir.mkdir(parents=True, exist_ok=True)
    conf = a.workdir / "nginx.conf"
    conf.write_text(text)
    os.execv(nginx, [nginx, "-c", str(conf.resolve()), "-p", str(a.workdir.resolve()), "-e",
                     str((a.workdir / "error.log").resolve())])


if __name__ == "__main__":
    main()
