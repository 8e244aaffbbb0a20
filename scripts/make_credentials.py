"""Credentials for a federation across sites: a private CA, the SuperLink's TLS certificate,
and one SuperNode authentication key pair per site.

    python scripts/make_credentials.py creds site-a site-b --superlink-host superlink.example.org

writes into ``creds/``:

- ``ca.crt`` (give to every SuperNode and to every `flwr` user: ``--root-certificates`` and
  ``root-certificates`` in the Flower configuration), ``ca.key`` (keep offline);
- ``server.pem``, ``server.key``: the SuperLink's certificate and key, valid for the given
  host names/IPs plus ``localhost`` and ``127.0.0.1``;
- ``<site>`` and ``<site>.pub``: the site's OpenSSH ECDSA P-384 key pair. The private key
  stays at the site (``flower-supernode --auth-supernode-private-key``); the public key is
  registered once with ``flwr supernode register <site>.pub <connection>``.

Options and site names may come in any order. It then prints the commands to start the
SuperLink (bound to the loopback, behind scripts/fleet_proxy.py) and to register each site. The CA and
existing site keys are kept, so adding a site or a host name later only reissues the
server certificate (signed by the same CA, so SuperNodes need nothing new).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    return serialization.load_pem_private_key(path.read_bytes(), None)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA (created once; reused when ``ca.crt`` and ``ca.key`` exist)."""
    crt, key = out / "ca.crt", out / "ca.key"
    if crt.exists() and key.exists():
        return x509.load_pem_x509_certificate(crt.read_bytes()), _load_key(key)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    now = dt.datetime.now(dt.timezone.utc)
    name = _name("fedapp federation CA")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(ca_key, hashes.SHA384()))
    _write(key, _pem_key(ca_key), private=True)
    _write(crt, cert.public_bytes(serialization.Encoding.PEM))
    return cert, ca_key


def make_server_cert(out: Path, hosts: list[str], ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> None:
    """server.pem/server.key for the SuperLink; its names are what clients dial (SANs)."""
    names = list(dict.fromkeys([*hosts, "localhost", "127.0.0.1"]))
    sans: list[x509.GeneralName] = []
    for h in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    key = ec.generate_private_key(ec.SECP384R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(names[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA384()))
    _write(out / "server.key", _pem_key(key), private=True)
    _write(out / "server.pem", cert.public_bytes(serialization.Encoding.PEM))


def make_supernode_keys(out: Path, site: str) -> Path:
    """OpenSSH ECDSA P-384 key pair ``<site>``/``<site>.pub`` (the format Flower loads); kept if present."""
    private, public = out / site, out / f"{site}.pub"
    if not private.exists():
        key = ec.generate_private_key(ec.SECP384R1())
        _write(private, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()), private=True)
        _write(public, key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH) + f" {site}\n".encode())
    return public


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="output folder")
    p.add_argument("sites", nargs="*", help="one SuperNode key pair per site name")
    p.add_argument("--superlink-host", action="append", default=[],
                   help="host name or IP the SuperNodes and flwr users dial (repeatable)")
    a = p.parse_intermixed_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ca, ca_key = make_ca(out)
    make_server_cert(out, a.superlink_host, ca, ca_key)
    pubs = [make_supernode_keys(out, site) for site in a.sites]
    # the SuperLink on the loopback only; the proxy is its public face, forwarding the Fleet API alone
    print(f"SuperLink (docs/deployment.md):\n  flower-superlink --ssl-ca-certfile {out}/ca.crt --ssl-certfile "
          f"{out}/server.pem --ssl-keyfile {out}/server.key --enable-supernode-auth "
          "--disable-runtime-dependency-installation --host 127.0.0.1 --port 9093\n"
          f"  python scripts/fleet_proxy.py --listen 0.0.0.0:9092 --superlink 127.0.0.1:9093 --creds {out} "
          "--workdir /var/lib/fedapp/fleet-proxy")
    if pubs:
        print("Register each site (with a `flwr` connection to that SuperLink named <connection>):")
        for pub in pubs:
            print(f"  flwr supernode register {pub} <connection> --name {pub.stem}")


if __name__ == "__main__":
    main()
