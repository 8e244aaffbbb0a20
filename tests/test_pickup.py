"""``fedapp.server.pickup``: Flower's simulation engine takes pushed messages when the ServerApp wakes
it, not at its next 0.1 s tick; its real scanning function runs here on a stand-in LinkState."""

import queue
import threading

from flwr.server.superlink.fleet.vce import vce_api

from fedapp.server import pickup


class State:
    """The one LinkState call the scanner makes: a node's pending messages."""

    def __init__(self):
        self.pending: dict[int, list[str]] = {1: [], 2: []}
        self.scans = 0

    def get_message_ins(self, node_id, limit):
        self.scans += 1
        out, self.pending[node_id] = self.pending[node_id][:limit], self.pending[node_id][limit:]
        return out


def test_a_push_wakes_flowers_pickup_and_stop_still_ends_it(monkeypatch):
    monkeypatch.setattr(pickup, "_HOOKED", None)
    assert pickup.wake() is False  # no engine in this process
    state, out, stop = State(), queue.Queue(), threading.Event()
    scanner = threading.Thread(target=vce_api.add_messages_to_queue, args=(state, out, {1: 0, 2: 1}, stop),
                               daemon=True)
    scanner.start()
    try:
        assert pickup.wake() is True
        assert "wait" in vars(stop)  # the scanner's wait is hooked
        # the hooked wait returns at a push, not at its timeout of an hour (pushed until it returns: the
        # scanner's own waits may take a push first)
        returned = []
        waiter = threading.Thread(target=lambda: returned.append(stop.wait(3600)), daemon=True)
        waiter.start()
        for _ in range(600):
            pickup._PUSHED.set()
            waiter.join(timeout=0.1)
            if not waiter.is_alive():
                break
        assert returned == [False]
        state.pending[2].append("m")
        assert pickup.wake() is True
        assert out.get(timeout=60) == "m"
    finally:
        stop.set()
    scanner.join(timeout=60)
    assert not scanner.is_alive()  # the 0.1 s timed wait still sees the stop
    assert stop.wait(None) is True  # an untimed wait is Flower's own
    assert pickup.wake() is False  # the engine is gone: nothing to wake
