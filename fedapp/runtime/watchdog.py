"""SuperLink watchdog: a site's ClientApp process stops working for a SuperLink that is gone.

Flower 1.41's SuperNode retries an unreachable SuperLink forever and tells nothing to the
``flwr-clientapp`` process working on a message: that process trains to the end of its
message (as long as a round's local training lasts, minutes on real data) although the
ServerApp waiting for its reply died with the SuperLink. This mod watches the SuperLink
from that process while it handles a message: every ``PROBE_INTERVAL`` s it asks the
SuperLink's ``/health`` (at the address, and with the CA certificate, of the SuperNode that
started the process, read from the SuperNode's command line). When no answer came for
``superlink-grace`` s (node config, default ``GRACE``; 0 turns the watchdog off) it raises
:class:`SuperLinkLost` in the ClientApp, which then ends as on any error: an error reply to
its SuperNode (which delivers it, or drops it, once it reaches a SuperLink again, and goes on
pulling messages) and the process exits.

An answer 502/503/504 counts as none: that is what a reverse proxy in front of the SuperLink
(``scripts/fleet_proxy.py``, which forwards ``/health``) answers when the SuperLink is gone.
The mod does nothing outside a ``flwr-clientapp`` process started by ``flower-supernode``
(simulations, in-process runs, ``--isolation process``).
"""

from __future__ import annotations

import os
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from logging import INFO
from pathlib import Path

from flwr.app import Context, Message
from flwr.common import log

from fedapp.core.compat import ClientAppCallable

PROBE_INTERVAL = 2.0
GRACE = 8.0
PROBE_SIGNAL = signal.SIGUSR1


class SuperLinkLost(RuntimeError):
    """The SuperLink did not answer for ``superlink-grace`` s while this message was handled."""


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ancestor(program: str, pid: int | None = None) -> tuple[int, list[str]] | None:
    """The nearest ancestor of ``pid`` (this process) running ``program`` (a Flower executable): its
    pid and the arguments after the program's name; None without one or off Linux."""
    try:
        pid = _ppid(pid or os.getpid())
        while pid > 1:
            argv = _cmdline(pid)
            start = next((i for i, a in enumerate(argv) if Path(a).name == program), None)
            if start is not None:
                return pid, argv[start + 1:]
            pid = _ppid(pid)
    except (OSError, ValueError, IndexError):
        pass
    return None


def supernode_superlink(pid: int | None = None) -> tuple[str, str | bool] | None:
    """The ``/health`` URL of the SuperLink the nearest ``flower-supernode`` ancestor of ``pid``
    (this process) dials, and what verifies its certificate (CA path, True: system CAs, False:
    ``--insecure``); None without such an ancestor or off Linux."""
    if (found := ancestor("flower-supernode", pid)) is None:
        return None
    try:
        # Flower's own parser, so defaults (address, TLS) are those the SuperNode applied
        from fedapp.core.compat import supernode_parser

        args, _ = supernode_parser().parse_known_args(found[1])
        cwd = Path(f"/proc/{found[0]}/cwd").resolve()
    except (ImportError, OSError, SystemExit):
        return None
    ca = args.root_certificates and str(cwd / args.root_certificates)
    verify = False if args.insecure else ca or True
    return f"{'http' if args.insecure else 'https'}://{args.superlink}/health", verify


class _Watch:
    """Probes ``url`` in a thread; after ``grace`` s without an answer interrupts the main thread."""

    armed: _Watch | None = None  # the watch whose loss the signal handler raises

    def __init__(self, url: str, verify: str | bool, grace: float):
        self.url, self.grace = url, grace
        self.tls = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None) if verify else None
        self.stop = threading.Event()
        self.lost_after: float | None = None
        self.thread = threading.Thread(target=self.run, name="superlink-watchdog", daemon=True)

    def alive(self) -> bool:
        try:
            urllib.request.urlopen(self.url, timeout=PROBE_INTERVAL, context=self.tls).close()
            return True
        except urllib.error.HTTPError as err:
            return err.code not in (502, 503, 504)
        except (OSError, ValueError):  # refused, reset, timed out, TLS failed
            return False

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(PROBE_INTERVAL):
            if self.alive():
                last = time.monotonic()
            elif time.monotonic() - last >= self.grace and not self.stop.is_set():
                self.lost_after = time.monotonic() - last
                signal.pthread_kill(threading.main_thread().ident, PROBE_SIGNAL)
                return

    def __enter__(self) -> _Watch:
        _Watch.armed = self
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        _Watch.armed = None  # a signal still in flight is then ignored
        self.stop.set()
        self.thread.join()


def _raise_lost(signum, frame) -> None:
    watch = _Watch.armed
    if watch is not None and watch.lost_after is not None:
        raise SuperLinkLost(f"no answer from the SuperLink ({watch.url}) for {watch.lost_after:.0f} s: "
                            "its ServerApp is gone, so this message's work is abandoned")


_target: list = []  # the SuperNode's SuperLink, looked up once per process


def superlink_watchdog_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod: handle ``msg`` under the watchdog when this is a SuperNode's ClientApp process."""
    if not _target:
        in_clientapp = Path(sys.argv[0]).name == "flwr-clientapp"
        _target.append(supernode_superlink() if in_clientapp and sys.platform == "linux" else None)
    try:
        grace = float(context.node_config.get("superlink-grace", GRACE))
    except ValueError:
        raise ValueError(f"node config superlink-grace={context.node_config['superlink-grace']!r}: "
                         "not a number of seconds") from None
    if _target[0] is None or grace <= 0 or threading.current_thread() is not threading.main_thread():
        return call_next(msg, context)
    signal.signal(PROBE_SIGNAL, _raise_lost)  # kept installed: a late signal must never kill the process
    log(INFO, "Watching the SuperLink at %s (superlink-grace %g s)", _target[0][0], grace)
    with _Watch(*_target[0], grace):
        return call_next(msg, context)
