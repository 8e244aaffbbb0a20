"""Floor of benchmark 1: one round's local training as a bare torch loop in one process.

The same clients' tensors (fedapp.core.experiment.client_data), the same LeNet, 50 SGD steps of
batch 32 per client, no Flower, no messages. ``--batches inline`` prepares each batch in the
loop (gather, crop/flip, normalise, as the app's loader must); ``prebuilt`` times forward,
backward and step alone on batches made beforehand.

    python simulations/bench/floor.py --repeats 3 --threads 2
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from common import BASE, fmt, load, record, stats

import torch
import torch.nn.functional as F

from fedapp.runtime.registry import parse_run_config
from fedapp.core.data.loader import PAD, crop_flip, prepare
from fedapp.core.experiment import client_data, device_of
from fedapp.core.models import build_model


def batches(d, steps: int, bs: int, g: torch.Generator, channels_last: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Drawn on the generator's device, where ``d``'s tensors are (as the app's loader draws them on
    the client's device). ``channels_last``: laid out NHWC, as the app's loader hands them to the model
    (run config channels-last)."""
    out = []
    for _ in range(steps):
        idx = torch.randint(len(d.train_y), (bs,), generator=g, device=g.device)
        x = d.train_x[idx]
        if d.augment:
            off = torch.randint(0, 2 * PAD + 1, (2, bs), generator=g, device=g.device)
            x = crop_flip(x, off[0], off[1], torch.rand(bs, generator=g, device=g.device) < 0.5)
        x = prepare(x, d.mean, d.std)
        out.append((x.contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 4 else x,
                    d.train_y[idx]))
    return out


def sam_gradient(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, rho: float) -> None:
    """SAM's gradient in ``.grad``: g at w, then the gradient at w + rho g/||g|| (w restored)."""
    params = list(model.parameters())
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        scale = rho / (torch.sqrt(sum((p.grad ** 2).sum() for p in params)) + 1e-12)
        saved = [p.detach().clone() for p in params]
        for p in params:
            p.add_(p.grad * scale)
            p.grad.zero_()
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        for p, w in zip(params, saved):
            p.copy_(w)


def on(d, dev: torch.device):
    """A client's data on ``dev`` (its normalisation too, so no batch copies it there)."""
    if dev.type == "cpu":
        return d
    return dataclasses.replace(d, train_x=d.train_x.to(dev), train_y=d.train_y.to(dev),
                               mean=torch.tensor(d.mean, device=dev), std=torch.tensor(d.std, device=dev))


def one_round(clients, cfg, prebuilt: bool, g: torch.Generator, sam_rho: float = 0.0) -> tuple[float, float]:
    """(wall, CPU) seconds for every client's local steps (batches made beforehand are not timed);
    with ``sam_rho`` each step is a SAM step (two forward and backward passes). On a GPU
    (``cfg.device``), as the app's client does each message: the client's data and model moved
    there, batches drawn there, and one wait for the GPU at the end of each client's steps."""
    steps, bs, nhwc = cfg.local_steps, cfg.batch_size, cfg.channels_last
    dev = device_of(cfg)
    if dev.type != "cpu":  # a generator on the device, seeded from the host's
        g = torch.Generator(dev).manual_seed(int(torch.randint(2**62, (), generator=g)))
    ready = [batches(on(d, dev), steps, bs, g, nhwc) for d in clients] if prebuilt else None
    t0, c0 = time.perf_counter(), time.process_time()
    for i, d in enumerate(clients):
        torch.manual_seed(cfg.seed)
        d = on(d, dev)
        model = build_model(cfg.model, tuple(d.train_x.shape[1:]), d.num_classes).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        for x, y in ready[i] if prebuilt else batches(d, steps, bs, g, nhwc):
            opt.zero_grad()
            if sam_rho:
                sam_gradient(model, x, y, sam_rho)
            else:
                F.cross_entropy(model(x), y).backward()
            opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--batches", choices=("inline", "prebuilt"), default="inline")
    p.add_argument("--local-steps", type=int, default=BASE["local-steps"])
    p.add_argument("--num-clients", type=int, default=BASE["num-clients"])
    p.add_argument("--out")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    cfg = parse_run_config({**BASE, "local-steps": a.local_steps, "num-clients": a.num_clients})
    clients = [client_data(cfg, pid) for pid in range(cfg.num_clients)]
    g = torch.Generator().manual_seed(0)
    one_round(clients[:1], cfg, a.batches == "prebuilt", g)  # warm-up
    times, cpu = zip(*[one_round(clients, cfg, a.batches == "prebuilt", g) for _ in range(a.repeats)])
    s, c = stats(times), stats(cpu)
    print(f"floor ({a.batches}, {a.threads} threads, {cfg.num_clients}x{cfg.local_steps} steps): "
          f"{fmt(s)} per round, CPU {fmt(c)}; {load()}")
    record(a.out, bench="floor", batches=a.batches, threads=a.threads, clients=cfg.num_clients,
           steps=cfg.local_steps, seconds=times, cpu_seconds=cpu, cpu=c, **s)


if __name__ == "__main__":
    main()
