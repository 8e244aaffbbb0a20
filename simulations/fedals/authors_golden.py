"""Golden numbers from the FedALS authors' code (github Peyman-gholami/FedALS) on a tiny setting.

Runs their unmodified DSGDAlg.parallel_sgd_layer / parallel_scaffold_layer with their Node, Network
and ResNet classes from a scratch copy of their checkout, with a Python environment that runs their code
(their imports of bitsandbytes and transformers are stubbed; only the LLM paths use them):

    cp -r <authors' checkout> SCRATCH
    <their python> simulations/fedals/authors_golden.py SCRATCH tests/data/fedals_authors_golden.json

Setting (``SETTING``): 5 nodes, ResNet-20, each node holds 8 fixed images of 2 classes and uses batches
of 8 (every batch is its whole data, so both codes see the same batches in any order), tau = H = 2,
alpha = 3 (body period 6 steps), L = 19 of their 20 layer groups (the body is every conv, the head fc),
SGD lr 2^-5 (their cte = True, exp = 5), momentum 0.9, weight decay 1e-4. Images and the initial model
come from numpy's RandomState (``golden_images``, ``initial_state``), so the test rebuilds them in the
project venv. Their loop averages after iteration t whenever t % period == 0: after iteration 0 (one
step) everything, then the head every tau and the body every alpha tau iterations. The JSON holds,
for FedAvg (alpha = 1) and FedALS, the averaged model and node 0's model after ``CHECKPOINTS``
iterations (observed when node 0 starts the next iteration; their code is not changed) as per-tensor
(sum, sum of squares, projection on a fixed random tensor); and for their SCAFFOLD the controls c_i,
c at ``SCAFFOLD_CHECKPOINTS`` and whether x_pre shares node.x's tensors. Numbers only.
"""

from __future__ import annotations

import json
import sys
import types

import numpy as np

SETTING = {"nodes": 5, "per_node": 8, "tau": 2, "alpha": 3, "L": 19, "lr_exp": 5, "momentum": 0.9,
           "weight_decay": 1e-4}
CHECKPOINTS = [1, 5, 7, 13]  # iterations done: 0 (first average), 0-4 (mid body period), one and two body periods
SCAFFOLD_CHECKPOINTS = [1, 3, 7, 9, 13]


def golden_images():
    """(x, y) of all nodes, node k holding rows 8k..8k+7 with labels 2k, 2k+1."""
    rs = np.random.RandomState(0)
    n = SETTING["nodes"] * SETTING["per_node"]
    x = rs.standard_normal((n, 3, 32, 32)).astype(np.float32)
    y = np.array([2 * (i // SETTING["per_node"]) + i % 2 for i in range(n)], dtype=np.int64)
    return x, y


def initial_state(shapes: list[tuple[str, tuple]]) -> list[np.ndarray]:
    """Values for the state entries in order: He-normal conv/linear weights, small biases, BatchNorm
    weight 1 / bias 0 / running mean 0 / running var 1, counters 0. ``shapes``: (kind, shape)."""
    rs = np.random.RandomState(1)
    out = []
    for kind, shape in shapes:
        if kind == "weight":
            fan_in = int(np.prod(shape[1:]))
            out.append((rs.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))
        elif kind == "bias":
            out.append((rs.standard_normal(shape) * 0.01).astype(np.float32))
        elif kind in ("bn.weight", "running_var"):
            out.append(np.ones(shape, np.float32))
        elif kind == "count":
            out.append(np.zeros(shape, np.int64))
        else:
            out.append(np.zeros(shape, np.float32))
    return out


def kind_of(key: str, ndim: int, is_bn: bool) -> str:
    last = key.rsplit(".", 1)[-1]
    if last == "num_batches_tracked":
        return "count"
    if last in ("running_mean", "running_var"):
        return last
    if is_bn:
        return "bn.weight" if last == "weight" else "bn.bias"
    return "weight" if ndim > 1 else "bias"


def summary(state: dict) -> list[list[float]]:
    """Per tensor, in state order: [sum, sum of squares, projection on RandomState(2) normals]."""
    rs = np.random.RandomState(2)
    rows = []
    for v in state.values():
        a = v.detach().cpu().double().numpy()
        rows.append([float(a.sum()), float((a * a).sum()), float((a * rs.standard_normal(a.shape)).sum())])
    return rows


def main(repo: str, out_path: str) -> None:
    for name in ("bitsandbytes", "bitsandbytes.optim", "transformers"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["bitsandbytes.optim"].Adam8bit = sys.modules["transformers"].AdamW = None
    sys.path.insert(0, repo)
    import torch
    import DSGDAlg
    from Functions import ResNet, ResidualBlock
    from NetworkClass import Network
    from NodeClass import Node

    torch.set_num_threads(1)
    x, y = golden_images()
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(dataset, batch_size=8)
    model = ResNet(ResidualBlock, [3, 3, 3])
    bn = {n for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)}
    sd = model.state_dict()
    shapes = [(kind_of(k, v.dim(), k.rsplit(".", 1)[0] in bn), tuple(v.shape)) for k, v in sd.items()]
    model.load_state_dict({k: torch.from_numpy(a) for k, a in zip(sd, initial_state(shapes))})
    n, per = SETTING["nodes"], SETTING["per_node"]
    crit = torch.nn.CrossEntropyLoss()
    args = dict(identity=["cifar10"], total_data=n * per, whole_dataset=dataset, exp=SETTING["lr_exp"], cte=True,
                H=SETTING["tau"], sampling_f=10**6, device=torch.device("cpu"), criterion=crit, num_worker=0,
                batch_size=per, test_loader=loader, L=SETTING["L"], tokenizer=None)

    def network():
        net = Network(model, [], {k: [] for k in range(n)}, 0, 0)
        for k in range(n):
            net.all_node.append(Node(["cifar10"], model, (k * per, (k + 1) * per), dataset, [], 0, [], 1,
                                     torch.device("cpu"), crit, 0, per))
        return net

    def observed(record):
        """Their Node.local_sgd, called by node 0 at iteration t before any node steps: the state
        after the averages of iteration t - 1, recorded for t in the checkpoints."""
        real = Node.local_sgd

        def local_sgd(node, identity, total_data, t, lr, tokenizer):
            if node is node.net.all_node[0] and t in record["at"]:
                record["rows"].append(record["take"](node.net))
            return real(node, identity, total_data, t, lr, tokenizer)
        return local_sgd

    def run(fn, alpha, at, take):
        torch.manual_seed(0)
        net = network()
        for nd in net.all_node:
            nd.net = net
        record = {"at": at, "take": take, "rows": []}
        Node.local_sgd, real = observed(record), Node.local_sgd
        try:
            fn(iters=max(at) + 1, alpha=alpha, network=net, **args)
        finally:
            Node.local_sgd = real
        return record["rows"]

    def models(net):
        return {"averaged": summary(net.final(["cifar10"], n * per).state_dict()),
                "node0": summary(net.all_node[0].x.state_dict())}

    def controls(net):
        node = net.all_node[0]
        shared = all(a.data_ptr() == b.data_ptr() for a, b in zip(node.x_pre.state_dict().values(),
                                                                  node.x.state_dict().values()))
        return {"x_pre_shares_x": shared, "c_nodes": [summary(nd.c.state_dict()) for nd in net.all_node]}

    out = {"setting": SETTING, "checkpoints": CHECKPOINTS,
           "fedavg": run(DSGDAlg.parallel_sgd_layer, 1, CHECKPOINTS, models),
           "fedals": run(DSGDAlg.parallel_sgd_layer, SETTING["alpha"], CHECKPOINTS, models),
           "scaffold": {"checkpoints": SCAFFOLD_CHECKPOINTS,
                        "runs": run(DSGDAlg.parallel_scaffold_layer, SETTING["alpha"], SCAFFOLD_CHECKPOINTS,
                                    controls)}}
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
