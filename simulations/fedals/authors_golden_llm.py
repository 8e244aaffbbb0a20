"""Golden numbers from the FedALS authors' language-model path (github Peyman-gholami/FedALS) on a tiny
random-weight OPT.

Runs their unmodified DSGDAlg.parallel_sgd_layer with identity ["LLM"] and their Node and Network
classes from a scratch copy of their checkout, with a Python environment that runs their code
(transformers 4.36, which still has the ``transformers.AdamW`` they import; torch 2.x):

    cp -r <authors' checkout> SCRATCH
    <their python> simulations/fedals/authors_golden_llm.py SCRATCH tests/data/fedals_authors_golden_llm.json

What is injected, their files unchanged: the model (an ``OPTForCausalLM`` of ``fedapp.core.llm.opt_config``,
12 decoder layers of width 16, put in eval mode as their ``from_pretrained`` model is, with the initial
weights of ``initial_state``), the tokenizer (``fedapp.core.llm.word_tokenizer`` of the prompts, [PAD]
added as they add it), the data (``Prompts``: the prompts as their ``form_training_prompts`` writes
them, with the ``select`` and ``train_test_split`` their code calls), the test loader, and
``torch.Tensor.cuda`` made the identity (their LLM path moves every batch to CUDA; the machine has
none, and their ``torch.cuda.amp.autocast`` is then a no-op). Their ``bitsandbytes`` import
(Adam8bit, unused) is stubbed.

Setting (``SETTING``): 5 nodes of 4 prompts each, batches of 4 (every batch is the node's whole data,
so both codes see the same batches in any order), tau = H = 2, alpha = 3, L = 11 of their 14 layer
groups (the body: the embeddings with the final layer norm and decoder layers 0-9; the head: layers 10
and 11 and lm_head), their AdamW (lr from their schedule, eps 1e-6, no weight decay: their
``AdamW(self.x.parameters(), lr=1e-4)``), learning rate 2^-7 / (t/100 + 10) (cte = [100, 10]). The
JSON holds, for FedAvg (alpha = 1) and FedALS, the averaged model and node 0's model after
``CHECKPOINTS`` iterations as per-tensor (sum, sum of squares, projection on a fixed random tensor),
and the test loss their ``loss`` reports for the averaged model. Numbers only.
"""

from __future__ import annotations

import json
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the project, run as a script
from simulations.fedals.authors_golden import summary  # noqa: E402

SETTING = {"nodes": 5, "per_node": 4, "tau": 2, "alpha": 3, "L": 11, "lr_exp": 7, "cte": [100, 10], "hidden": 16,
           "test": 8}
CHECKPOINTS = [1, 5, 7, 13]  # iterations done: 0 (first average), 0-4 (mid body period), one and two body periods
WORDS = ("the king my lord good sir what now is this a fool love night day come go hence why speak no yes "
         "heaven fair").split()


def golden_prompts(prompt) -> tuple[list[str], list[str]]:
    """(training prompts, node k holding 4k..4k+3; test prompts) from RandomState(0): pairs of 3 to 12
    random words, so that the prompts' lengths (and the padding of each batch) differ."""
    rs = np.random.RandomState(0)

    def sentence():
        return " ".join(WORDS[i] for i in rs.randint(len(WORDS), size=rs.randint(3, 13))) + "."
    n = SETTING["nodes"] * SETTING["per_node"] + SETTING["test"]
    texts = [prompt(sentence(), sentence(), int(rs.randint(3))) for _ in range(n)]
    return texts[:-SETTING["test"]], texts[-SETTING["test"]:]


def initial_state(sd: dict) -> dict:
    """Values for the model's state in order, from RandomState(1): weights N(0, 0.02^2) (OPT's
    initialisation), biases N(0, 0.01^2), layer-norm weights 1 + N(0, 0.1^2); ``lm_head.weight`` is the
    token embedding (tied)."""
    import torch

    rs = np.random.RandomState(1)
    out = {}
    for key, v in sd.items():
        if key.endswith("lm_head.weight"):
            out[key] = next(t for k, t in out.items() if k.endswith("embed_tokens.weight"))
            continue
        a = rs.standard_normal(tuple(v.shape))
        a = 1.0 + 0.1 * a if "layer_norm.weight" in key else a * (0.01 if key.endswith("bias") else 0.02)
        out[key] = torch.from_numpy(a.astype(np.float32))
    return out


def main(repo: str, out_path: str) -> None:
    import torch
    from transformers import OPTForCausalLM  # before the stub: transformers looks bitsandbytes up

    for name in ("bitsandbytes", "bitsandbytes.optim"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["bitsandbytes.optim"].Adam8bit = None
    sys.path.insert(0, repo)
    import DSGDAlg
    from fedapp.core.llm import opt_config, prompt, word_tokenizer
    from NetworkClass import Network
    from NodeClass import Node

    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.set_num_threads(1)

    class Prompts(torch.utils.data.Dataset):
        """Their LLM dataset's interface: rows {"text": prompt}, select, train_test_split."""

        def __init__(self, texts):
            self.texts = list(texts)

        def __len__(self):
            return len(self.texts)

        def __getitem__(self, i):
            return {"text": self.texts[i]}

        def select(self, indices):
            return Prompts([self.texts[i] for i in indices])

        def train_test_split(self, test_size):  # their training-loss sample: here the first prompt
            return {"train": self, "test": self.select([0])}

    train, test = golden_prompts(prompt)
    tokenizer = word_tokenizer(train + test)
    dataset = Prompts(train)
    test_loader = torch.utils.data.DataLoader(Prompts(test), batch_size=32)
    model = OPTForCausalLM(opt_config(SETTING["hidden"], len(tokenizer), 128))
    model.load_state_dict(initial_state(model.state_dict()))
    model.eval()  # as from_pretrained returns it; their nodes train deep copies of it
    n, per = SETTING["nodes"], SETTING["per_node"]
    crit = torch.nn.CrossEntropyLoss()
    args = dict(identity=["LLM"], total_data=n * per, whole_dataset=dataset, exp=SETTING["lr_exp"], cte=SETTING["cte"],
                H=SETTING["tau"], sampling_f=1, device=torch.device("cpu"), criterion=crit, num_worker=0,
                batch_size=per, test_loader=test_loader, L=SETTING["L"], tokenizer=tokenizer)

    def network():
        net = Network(model, [], {k: [] for k in range(n)}, 0, 0)
        for k in range(n):
            net.all_node.append(Node(["LLM"], model, (k * per, (k + 1) * per), dataset, [], 0, [], 1,
                                     torch.device("cpu"), crit, 0, per))
        return net

    def run(alpha):
        """Their Node.local_sgd, called by node 0 at iteration t before any node steps, records the state
        after the averages of iteration t - 1 for t in the checkpoints."""
        torch.manual_seed(0)
        net, rows, real = network(), [], Node.local_sgd

        def local_sgd(node, identity, total_data, t, lr, tok):
            if node is net.all_node[0] and t in CHECKPOINTS:
                rows.append({"averaged": summary(net.final(["LLM"], n * per).state_dict()),
                             "node0": summary(node.x.state_dict())})
            return real(node, identity, total_data, t, lr, tok)
        Node.local_sgd = local_sgd
        try:
            losses = DSGDAlg.parallel_sgd_layer(iters=max(CHECKPOINTS) + 1, alpha=alpha, network=net, **args)[0]
        finally:
            Node.local_sgd = real
        for row, t in zip(rows, CHECKPOINTS):
            row["test_loss"] = losses[t][1]
        return rows

    out = {"setting": SETTING, "checkpoints": CHECKPOINTS, "vocab": len(tokenizer),
           "state_keys": list(model.state_dict()), "fedavg": run(1), "fedals": run(SETTING["alpha"])}
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
