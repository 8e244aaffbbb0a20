"""GPU handling, checked on a machine without one: ``device='auto'`` picks CUDA when torch finds
it, a client's training steps and evaluation batches copy nothing back to the host (so on a GPU
nothing waits for the device per step), and ``num-gpus`` fractions reach Ray's actor resources."""

from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from fedapp.runtime.client_app import app
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import device_of
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.core.training import evaluate

#: tensor methods that copy device memory to the host (and wait for the device). ``.to(device)``
#: is not among them: on this CPU-only machine the client's device is the host, so a move to it
#: cannot be told from a copy back; fedapp's clients copy to the host with ``.cpu()``.
HOST_COPIES = {"item", "cpu", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"}


class HostCopies(TorchFunctionMode):
    """Counts the tensor calls, from Python, that bring a tensor's data to the host."""

    def __init__(self):
        super().__init__()
        self.calls = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if (name := getattr(func, "__name__", "")) in HOST_COPIES:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def test_auto_device_is_cuda_when_torch_finds_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_of(parse_run_config({"device": "auto"})) == torch.device("cuda")
    assert device_of(parse_run_config({"device": "cpu"})) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_of(parse_run_config({"device": "auto"})) == torch.device("cpu")


def client_host_copies(run_config: dict) -> list[tuple[str, Counter]]:
    """Host copies inside each training and evaluation message of a one-round in-process run."""
    seen = []

    def counted(msg, context):
        with HostCopies() as mode:
            reply = app(msg, context)
        if msg.metadata.message_type != "query":
            seen.append((msg.metadata.message_type, mode.calls))
        return reply

    run_local(run_config, grid=InProcessGrid(counted, run_config["num-clients"], run_config))
    return seen


@pytest.mark.parametrize("strategy", ["fedavg", "fedsmoo", "scaffold"])
def test_training_steps_copy_nothing_to_the_host(small_config, strategy):
    """The host copies of a client's message (its reply, its state, the mean loss) do not grow
    with its local steps: none is made per step."""
    cfg = {**small_config, "strategy": strategy, "num-server-rounds": 1, "num-clients": 2, "fraction-evaluate": 0.0}
    few, many = (client_host_copies({**cfg, "local-steps": k}) for k in (2, 7))
    assert [t for t, _ in few] == ["train", "train"] == [t for t, _ in many]
    assert [c for _, c in few] == [c for _, c in many]
    assert all(c["item"] == 1 for _, c in few)  # the mean training loss, once per message


def test_evaluation_batches_copy_nothing_to_the_host():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5))
    x, y = torch.randn(300, 3, 2, 2), torch.randint(0, 5, (300,))
    counts = []
    for batch_size in (150, 20):  # 2 and 15 batches
        with HostCopies() as mode:
            evaluate(model, x, y, batch_size=batch_size, classes=torch.tensor([0, 2, 3]), unmasked=True)
        counts.append(mode.calls)
    assert counts[0] == counts[1] == Counter(tolist=1)


def test_gpu_fractions_reach_the_ray_actors(tmp_path, monkeypatch):
    """`fedapp.runtime.launch --num-gpus 0.25`: the Flower config the launcher writes becomes the simulation
    config `flwr run` sends, then the Ray backend's per-client resources (four clients per GPU)."""
    from types import SimpleNamespace

    from flwr.cli.flower_config import read_superlink_connection
    from flwr.cli.run.run import _parse_deprecated_options
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
    from flwr.simulation.app import _run_simulation_settings

    from fedapp.runtime.launch import write_flower_config

    write_flower_config(tmp_path, 8, num_cpus=2, num_gpus=0.25)
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    sim = _parse_deprecated_options(read_superlink_connection("local"))
    nodes, backend, backend_config, _, _ = _run_simulation_settings(sim)
    assert (nodes, backend) == (8, "ray")
    backend_self = SimpleNamespace(client_resources_key="client_resources")
    assert RayBackend._validate_client_resources(backend_self, backend_config) == {"num_cpus": 2, "num_gpus": 0.25}
