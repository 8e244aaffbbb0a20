"""Sites bound to SuperNode keys: the table the operator keeps beside the SuperLink (``site-keys``).

In a deployment with SuperNode authentication every SuperNode holds a private key whose public
key was registered (``flwr supernode register``), and the SuperLink tells the ServerApp each
node's public key (Flower's ``Grid.get_nodes``: ``NodeInfo.public_key``, PEM). The table says
which key serves which partition, under which site name::

    [site-a]
    public-key = "ecdsa-sha2-nistp384 AAAA... site-a"   # the site's .pub file, as registered
    partition-id = 0

(or ``public-key-file = "creds/site-a.pub"``, relative to the table). At discovery a node is
accepted only for the partition its key is bound to: a key not in the table, or one claiming
another partition than its own, is refused with one line naming the key's fingerprint (as
``ssh-keygen -lf`` prints it), whatever the order the nodes connect in. A table giving two keys
one partition, or one key two sites, is refused before the run starts.

Without a table, where the SuperLink authenticates SuperNodes, each partition is bound to the
first key that claims it, for the rest of the run (``bind_first``, logged): a node with another
key never serves it, also once that key's node is gone. Which key claims first is then the order
the nodes answer in; the table decides it beforehand.
"""

from __future__ import annotations

import base64
import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from logging import INFO

from cryptography.hazmat.primitives import serialization
from flwr.common import log

from fedapp.core.config import ConfigError


@dataclass(frozen=True)
class Site:
    name: str
    partition: int
    fingerprint: str


def fingerprint(public_key) -> str:
    """OpenSSH's SHA256 fingerprint of a public key (``ssh-keygen -lf site-a.pub``)."""
    blob = public_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).split()[1]
    return "SHA256:" + base64.b64encode(hashlib.sha256(base64.b64decode(blob)).digest()).decode().rstrip("=")


def pem_fingerprint(pem: bytes) -> str:
    """The fingerprint of a key as the SuperLink reports it (PEM)."""
    return fingerprint(serialization.load_pem_public_key(pem))


def load(path: str | Path, num_clients: int) -> dict[str, Site]:
    """The table at ``path``: key fingerprint -> site. Raises ConfigError (one line) when the file
    is missing or malformed, a key does not parse, or keys and partitions are not one to one."""
    where = f"run config 'site-keys' = {str(path)!r}"
    path = Path(path).expanduser()
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{where}: cannot read it ({type(err).__name__}: {err})") from None
    by_key: dict[str, Site] = {}
    by_partition: dict[int, Site] = {}
    for name, entry in table.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("partition-id"), int) or (
                ("public-key" in entry) == ("public-key-file" in entry)):
            raise ConfigError(f"{where}: site {name!r} needs an integer 'partition-id' and one of 'public-key', "
                              "'public-key-file'")
        pid = entry["partition-id"]
        if not 0 <= pid < num_clients:
            raise ConfigError(f"{where}: site {name!r} has partition-id {pid}, outside 0..{num_clients - 1} "
                              "(num-clients)")
        try:
            text = entry.get("public-key") or (path.parent / entry["public-key-file"]).expanduser().read_text()
            key = fingerprint(serialization.load_ssh_public_key(text.strip().encode()))
        except (OSError, ValueError, IndexError, TypeError) as err:
            raise ConfigError(f"{where}: site {name!r}: not an OpenSSH public key ({type(err).__name__}: {err})"
                              ) from None
        site = Site(name, pid, key)
        if key in by_key:
            raise ConfigError(f"{where}: key {key} is given to both site {by_key[key].name!r} and site {name!r}")
        if pid in by_partition:
            other = by_partition[pid]
            raise ConfigError(f"{where}: partition {pid} has two keys, {other.fingerprint} (site {other.name!r}) "
                              f"and {key} (site {name!r})")
        by_key[key], by_partition[pid] = site, site
    return by_key


def refusal(sites: dict[str, Site], node: int, pem: bytes | None, claimed: int) -> str | None:
    """Why ``node`` (public key ``pem``, None when the SuperLink reports none) may not serve the
    partition it ``claimed``, in one line; None when its key is bound to that partition."""
    if not pem:
        return f"node {node} refused: the SuperLink reports no public key for it (site-keys needs " \
               "--enable-supernode-auth)"
    key = pem_fingerprint(pem)
    site = sites.get(key)
    if site is None:
        return f"node {node} refused: its key {key} is not in site-keys (it claims partition {claimed})"
    if site.partition != claimed:
        return (f"node {node} refused: its key {key} is site {site.name!r}'s, bound to partition {site.partition}, "
                f"but it claims partition {claimed}")
    return None


def bind_first(bound: dict[str, Site], node: int, pem: bytes | None, claimed: int) -> str | None:
    """Why ``node`` (public key ``pem``, None when the SuperLink reports none) may not serve the
    partition it ``claimed`` when no table is given, in one line; None when its key is bound to that
    partition. ``bound`` (key fingerprint -> site) grows with each key that claims a partition no key
    holds yet: bound to it from then on."""
    if not pem:
        return f"node {node} refused: the SuperLink reports no public key for it"
    key = pem_fingerprint(pem)
    owner = next((site for site in bound.values() if site.partition == claimed), None)
    if key not in bound and owner is None:
        bound[key] = Site(f"partition {claimed}", claimed, key)
        log(INFO, "partition %d bound to key %s (node %d) for the rest of the run: the first key to claim it "
            "(no site-keys)", claimed, key, node)
        return None
    if key not in bound:
        return (f"node {node} refused: partition {claimed} is bound to key {owner.fingerprint}, the first to claim it "
                f"(no site-keys), not to its key {key}")
    if bound[key].partition != claimed:
        return (f"node {node} refused: its key {key} is bound to partition {bound[key].partition}, which it claimed "
                f"first (no site-keys), but it claims partition {claimed}")
    return None
