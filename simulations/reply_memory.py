"""Peak memory of the server while it reads one bogus reply: a training reply that carries, besides
the model it should, an ArrayRecord of ``--bogus-mb`` MiB (docs/reliability.md, "Reply validation").

    PYTHONPATH=. python simulations/reply_memory.py --bogus-mb 256

The reply goes through ``Exchange.exchange`` (as it arrives; ``reply-memory-mb = 0``, so a reply that
is kept goes to disk, as a server short of memory does) and ``parse_replies``; the script prints the
process's peak RSS growth over that step (the reply itself is built before, and a valid reply is read
first) and the drop reason.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity

from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.server_app import build_strategy
from fedapp.server.discovery import ClientInfo

#: the model the bogus reply's partition should send back: one float32 array of 2^20 entries (4 MiB)
MODEL = 2**20


class OneReply:
    """A grid that answers each message it is sent with ``reply`` (as Flower's grids hand replies
    to ``Exchange.exchange``)."""

    def __init__(self, reply):
        self.reply = reply

    def send_and_receive(self, msgs, timeout=None):
        return [self.reply(msg) for msg in msgs]


def setup(run_config: dict):
    """(strategy, the message sent to partition 0, the reply spec it expects), as a ServerApp has them."""
    for name, value in (("_task_id", 1), ("_run_id", 1), ("_node_id", SUPERLINK_NODE_ID)):
        setattr(TaskIdentity, name, value)
    strategy = build_strategy(parse_run_config(run_config))
    strategy.clients = {0: ClientInfo(101, 10, 2, False)}
    sent = Message(RecordDict({"w": ArrayRecord({"w": Array(np.zeros(MODEL, np.float32))}),
                               "config": ConfigRecord({})}), dst_node_id=101, message_type=MessageType.TRAIN)
    return strategy, sent, {0: {"w": {"w": ((MODEL,), torch.float32)}}}


def reply_to(sent: Message, **records) -> Message:
    """Partition 0's valid reply to ``sent``, plus ``records``."""
    content = RecordDict({"w": ArrayRecord({"w": Array(np.ones(MODEL, np.float32))}),
                          "metrics": MetricRecord({"partition-id": 0, "num-examples": 5})})
    for name, record in records.items():
        content[name] = record
    return Message(content, reply_to=sent)


def bogus(nbytes: int) -> ArrayRecord:
    return ArrayRecord({"b": Array(np.ones(nbytes // 4, np.float32))})


def read(strategy, sent: Message, spec, reply: Message) -> list:
    """The valid replies the driver keeps of ``reply`` (its drops are in ``strategy.driver.wire.dropped``)."""
    driver = strategy.driver
    driver.wire.dropped.clear()
    return driver.parse_replies(driver.wire.exchange(OneReply(lambda msg: reply), [sent], expected=spec), spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bogus-mb", type=int, default=256)
    a = p.parse_args()
    strategy, sent, spec = setup({"strategy": "fedavg", "dataset": "synthetic", "reply-memory-mb": 0,
                                  "results-dir": "OUT"})
    read(strategy, sent, spec, reply_to(sent))  # a valid reply first: the modules the reading imports
    reply = reply_to(sent, bogus=bogus(a.bogus_mb * 2**20))
    with open("/proc/self/clear_refs", "w") as f:  # Linux: the peak RSS (VmHWM) restarts from the current RSS
        f.write("5")
    before = rss("VmRSS")
    kept = read(strategy, sent, spec, reply)
    print(f"bogus record {a.bogus_mb} MiB: kept {len(kept)} replies, dropped {dict(strategy.driver.wire.dropped)}, "
          f"peak RSS grew by {(rss('VmHWM') - before) / 1024:.0f} MiB while the server read it")


def rss(field: str) -> int:
    """A KiB figure of this process's ``/proc/self/status`` (Linux)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


if __name__ == "__main__":
    main()
