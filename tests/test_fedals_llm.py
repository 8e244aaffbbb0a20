"""FedALS on a language model (Table 1's OPT-125M / MultiNLI row), offline: a random-weight OPT of 12
decoder layers cut as the authors cut it, AdamW and the eta / (t/100 + 10) schedule as run-config
options, the body averaged every alpha tau steps, the traffic of Table 2's count for the OPT cut,
and the authors' LLM path (simulations/fedals/authors_golden_llm.py) on the same tiny setting."""

from __future__ import annotations

import gc
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

# the llm extra, looked up and not imported: its import would take seconds of every worker's collection
if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed (the llm extra)", allow_module_level=True)

from clients.fedals import FedALSClient  # noqa: E402
from clients.fedavg import FedAvgClient  # noqa: E402
from conftest import SHARED_DATA  # noqa: E402
from fedapp.core.config import ConfigError  # noqa: E402
from fedapp.runtime.registry import parse_run_config  # noqa: E402
from fedapp.core.experiment import ClientData  # noqa: E402
from fedapp.runtime.inprocess import InProcessGrid, run_local  # noqa: E402
from fedapp.core.llm import CausalLM, encode, opt125m_random_rows, opt_tiny, prompt, word_tokenizer  # noqa: E402
from fedapp.core.training import evaluate_lm, step_lr  # noqa: E402
from simulations.fedals.authors_golden import summary  # noqa: E402
from simulations.fedals.authors_golden_llm import CHECKPOINTS, SETTING, golden_prompts, initial_state  # noqa: E402
from strategies.base import FedStrategy, weighted_mean  # noqa: E402
from fedapp.server.replies import Reply  # noqa: E402
from strategies.fedals import FedALS  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "fedals_authors_golden_llm.json"
PLAYS = SHARED_DATA / "shakespeare.tar.gz"
needs_plays = pytest.mark.skipif(not PLAYS.is_file(), reason=f"the raw plays are not at {PLAYS}")


@pytest.fixture(scope="module")
def golden_data():
    """The golden setting's tokenizer, per-node training ids and test ids."""
    train, test = golden_prompts(prompt)
    tok = word_tokenizer(train + test)
    return tok, encode(tok, train), encode(tok, test)


def tiny_model(vocab: int) -> CausalLM:
    return opt_tiny((128,), 3, vocab_size=vocab, seq_len=128)


def authors_groups(keys: list[str]) -> list[list[str]]:
    """The authors' layer groups of an OPT (DSGDAlg.parallel_sgd_layer): a group opens at each key ending
    in k_proj.weight or naming "tokens" or "lm_head"."""
    groups: list[list[str]] = []
    for k in keys:
        if k.endswith("k_proj.weight") or "tokens" in k or "lm_head" in k:
            groups.append([k])
        else:
            groups[-1].append(k)
    return groups


def test_opt_cut_is_the_authors_body_and_head():
    """Table 5's cut as the authors' code makes it: their 14 groups (embeddings with the final layer norm,
    12 decoder layers, lm_head); L = 11 of them are the body (10 decoder layers), the rest the head.
    fedals.body-layers = 0 takes the model's declared head; an OPT without the declaration is refused
    with one line naming 'head-modules'. Their body group also holds the token embedding, which OPT ties
    to lm_head: ours gives that one tensor to the head alone (their loop loads lm_head last, so it follows
    the head's average there too), and the model's state names it once, as the embedding parameter, so it
    travels once a round (also in FedAvg's whole state); loading a state fills lm_head."""
    from transformers import OPTForCausalLM

    from fedapp.core.llm import opt_config

    model = tiny_model(50)
    cfg = parse_run_config({"strategy": "fedals", "model": "fedapp.core.llm:opt_tiny"})
    body, head = FedALS.body_head(cfg, model)
    groups = authors_groups(["lm." + k for k in model.lm.state_dict()])  # their model's keys name it twice
    assert len(groups) == 14 and groups[0][-1] == "lm.model.decoder.final_layer_norm.bias"
    tied, lm_head = "lm.model.decoder.embed_tokens.weight", "lm.lm_head.weight"
    assert model.lm.lm_head.weight is model.lm.model.decoder.embed_tokens.weight
    assert list(model.state_dict()) == [k for g in groups for k in g if k != lm_head]
    assert body == [k for g in groups[:11] for k in g if k != tied]
    assert head == [tied] + [k for g in groups[11:] for k in g if k != lm_head]
    assert head[1] == "lm.model.decoder.layers.10.self_attn.k_proj.weight"
    state = {k: torch.full_like(v, i) for i, (k, v) in enumerate(model.state_dict().items())}
    model.load_state_dict(state)
    assert torch.equal(model.lm.lm_head.weight, state[tied])
    bare = OPTForCausalLM(opt_config(16, 50, 128))
    with pytest.raises(ConfigError, match=r"^run config 'head-modules' = '' is invalid for fedals: OPTForCausalLM "
                                          r"declares no head"):
        FedALS.check_model(cfg, bare)


@pytest.mark.parametrize("key,value", [("optimizer", "adam"), ("lr-schedule", "cosine"), ("adam-beta2", 1.5),
                                       ("adam-eps", 0.0)])
def test_bad_optimizer_settings_are_one_line(key, value):
    with pytest.raises(ConfigError, match=rf"^run config '{key}' = {value!r} is invalid: allowed is "):
        parse_run_config({key: value})


def test_fedals_inverse_schedule():
    """Appendix E.2: eta / (t/100 + 10) at local iteration t."""
    assert step_lr("fedals-inverse", 0.5, 0) == 0.05 and step_lr("fedals-inverse", 0.5, 100) == 0.5 / 11
    assert step_lr("constant", 0.5, 1234) == 0.5


@pytest.mark.parametrize("optimizer", ["adamw", "adamw-authors"])
def test_adamw_state_and_schedule_persist_between_rounds(golden_data, optimizer):
    """A FedAvg client trains 2 rounds of 3 steps from the model it sent (one client: the average is its
    own model): its AdamW moments and step count and its iteration count t stay in its state, so the
    result is one round of 6 steps (every batch is the client's whole data)."""
    tok, x, _ = golden_data
    data = ClientData(0, x[:4], torch.zeros(4, dtype=torch.long), x[:0], x[:0].long(), 3, (), (), False,
                      vocab_size=len(tok))
    run_config = {"strategy": "fedavg", "model": "fedapp.core.llm:opt_tiny", "batch-size": 4, "lr": 0.01,
                  "optimizer": optimizer, "weight-decay": 1e-4, "lr-schedule": "fedals-inverse", "adam-eps": 1e-6}
    cfg = parse_run_config(run_config)
    torch.manual_seed(0)
    init = tiny_model(len(tok)).state_dict()

    def fit(steps, state, arrays, rnd):
        model = tiny_model(len(tok))
        config = {**FedStrategy.client_settings(cfg), "lr": 0.01, "server-round": rnd, "local-steps": steps}
        client = FedAvgClient(cfg, model, data, state)
        payload, _ = client.answer_train({"arrays": arrays}, config)
        return payload["arrays"], client.state

    once, state_once = fit(6, {}, init, 1)
    first, state = fit(3, {}, init, 1)
    twice, state = fit(3, state, first, 2)
    assert int(state["schedule"]["t"]) == 6 and int(state_once["schedule"]["t"]) == 6
    assert {int(v) for v in state["adamw.step"].values()} == {6}
    assert set(state["adamw.exp_avg"]) == {k for k, _ in tiny_model(len(tok)).named_parameters()}
    for k in init:
        torch.testing.assert_close(twice[k], once[k], rtol=1e-5, atol=1e-6, msg=k)
    tied = "lm.model.decoder.embed_tokens.weight"  # lm_head too
    assert not torch.equal(twice[tied], first[tied])


def test_opt_client_holds_one_model_copy_and_two_adamw_moments(golden_data):
    """What a FedALS client of the OPT keeps between rounds (its state; the model is built afresh for each
    message): its body once, without the tied embedding (the head's, received every round), AdamW's two
    moments of each parameter (the tied matrix once) and the step counts, nothing else; on a body round
    its reply is the whole model once (head and body, no buffers in an OPT): 2 x 2 + 1 scalars a parameter."""
    tok, x, _ = golden_data
    cfg = parse_run_config({"strategy": "fedals", "model": "fedapp.core.llm:opt_tiny", "batch-size": 4, "local-steps": 2,
                            "lr": 0.01, "optimizer": "adamw", "lr-schedule": "fedals-inverse", "fedals.alpha": 3})
    model = tiny_model(len(tok))
    strategy = FedALS(cfg, model)
    data = ClientData(0, x[:4], torch.zeros(4, dtype=torch.long), x[:0], x[:0].long(), 3, (), (), False,
                      vocab_size=len(tok))
    client = FedALSClient(cfg, tiny_model(len(tok)), data, {})
    reply, _ = client.answer_train(strategy.train_payload(0, 3), {**strategy.client_config("train", 0, 3), "server-round": 3})

    def numel(tensors):
        return sum(v.numel() for v in tensors.values())
    n = sum(p.numel() for p in model.parameters())
    state = client.state
    assert set(state) == {"body", "adamw.exp_avg", "adamw.exp_avg_sq", "adamw.step", "schedule"}
    assert list(state["body"]) == strategy.body_keys and "lm.model.decoder.embed_tokens.weight" not in state["body"]
    assert numel(state["body"]) + numel(reply["head"]) == numel(reply["body"]) + numel(reply["head"]) == n
    assert numel(state["adamw.exp_avg"]) == numel(state["adamw.exp_avg_sq"]) == n
    assert numel(state["adamw.step"]) == len(list(model.parameters())) and numel(state["schedule"]) == 1


def live_storages() -> dict[int, int]:
    """The storages of every live CPU tensor Python can reach: address -> bytes."""
    gc.collect()
    out = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and obj.device.type == "cpu" and obj.untyped_storage().nbytes():
            out[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
    return out


def test_opt_client_step_holds_params_grads_and_two_moments_only(golden_data):
    """During a local step of a FedALS client of the OPT between body averages (its body and AdamW state
    from its previous round), the tensor memory the client added is its model's parameters, their
    gradients and AdamW's two moments, each once, plus AdamW's step counts and a few bytes (the batch,
    the loss): the saved moments are the optimizer's state (no copy), the kept body is the model's.
    Counted over the storages of every live tensor at the optimizer's step."""
    tok, x, _ = golden_data
    cfg = parse_run_config({"strategy": "fedals", "model": "fedapp.core.llm:opt_tiny", "batch-size": 4, "local-steps": 2,
                            "lr": 0.01, "optimizer": "adamw", "lr-schedule": "fedals-inverse", "fedals.alpha": 3})
    strategy = FedALS(cfg, tiny_model(len(tok)))
    data = ClientData(0, x[:4], torch.zeros(4, dtype=torch.long), x[:0], x[:0].long(), 3, (), (), False,
                      vocab_size=len(tok))
    before = live_storages()

    def fit(states, server_round):  # the state handed over, as the ClientApp hands it (no reference kept)
        client = FedALSClient(cfg, tiny_model(len(tok)), data, states.pop())
        client.answer_train(strategy.train_payload(0, server_round), {**strategy.client_config("train", 0, server_round),
                                                              "server-round": server_round})
        return client.state
    states = [fit([{}], 3)]  # a body round: the client now keeps its body and AdamW's state
    seen = []

    def count(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"]]
        new = {ptr: n for ptr, n in live_storages().items() if ptr not in before}
        seen.append((sum(new.values()), sum(p.numel() * p.element_size() for p in params), len(params)))
    handle = register_optimizer_step_post_hook(count)
    try:
        fit(states, 4)
    finally:
        handle.remove()
    batch = 4 * 128 * 8  # the batch's ids as int64
    assert len(seen) == 2
    for total, param_bytes, n in seen:
        extra = total - 4 * param_bytes - 4 * n  # params, grads, 2 moments, a float32 step count each
        assert batch <= extra < 2 * batch < param_bytes // 10, (total, param_bytes, extra)


def drive(alpha: int, rounds: int, golden_data, *, first_one_step: bool, tau: int = 2):
    """The FedALS strategy and 5 FedALS clients of the golden setting, round by round (server round
    r + alpha, so round 0 is a body round). ``first_one_step``: round 0 is one step, as the authors'
    loop averages after iteration 0. Yields (round, strategy, each client's effective state) after
    each round: the model a client holds after loading what it keeps and what it received (its own
    body between body averages; OPT's tied token embedding follows the head's lm_head)."""
    tok, x, _ = golden_data
    n, per = SETTING["nodes"], SETTING["per_node"]
    cfg = parse_run_config({"strategy": "fedals", "model": "fedapp.core.llm:opt_tiny", "num-clients": n,
                            "batch-size": per,
                            "local-steps": tau, "lr": 2.0 ** -SETTING["lr_exp"], "optimizer": "adamw-authors",
                            "adam-eps": 1e-6, "weight-decay": 0.0, "lr-schedule": "fedals-inverse",
                            "fedals.alpha": alpha})
    model = tiny_model(len(tok))
    model.load_state_dict(initial_state(model.state_dict()))
    keys = list(model.state_dict())
    data = [ClientData(k, x[k * per:(k + 1) * per], torch.zeros(per, dtype=torch.long), x[:0], x[:0].long(), 3, (),
                       (), False, vocab_size=len(tok)) for k in range(n)]
    strategy = FedALS(cfg, model)
    states: dict[int, dict] = {k: {} for k in range(n)}
    for rnd in range(rounds):
        replies, server_round = [], rnd + alpha
        for k in range(n):
            config = {**strategy.client_config("train", k, server_round), "server-round": server_round,
                      "local-steps": 1 if first_one_step and rnd == 0 else tau}
            client = FedALSClient(cfg, tiny_model(len(tok)), data[k], states[k])
            payload, metrics = client.answer_train(strategy.train_payload(k, server_round), config)
            states[k] = client.state
            replies.append(Reply(k, payload, metrics))
        strategy.aggregate(server_round, replies)
        own = []
        for k in range(n):
            received = strategy.global_state if strategy.body_round == server_round else \
                {**strategy.global_state, **states[k]["body"]}
            model.load_state_dict({key: received[key] for key in keys})  # lm_head: the tied embedding
            own.append({"lm." + key: v.clone() for key, v in model.lm.state_dict().items()})  # both names, as theirs
        yield rnd, strategy, own


def test_fedals_averages_the_opt_body_every_alpha_tau_steps(golden_data):
    """alpha = 3, tau = 2: after every round the clients hold one head (layers 10-11, lm_head and the
    tied embedding); their bodies (decoder layers 0-9, positions, final layer norm) are one only after
    rounds 3 and 6, the body averages (every 6 steps), and differ between them. With alpha = 1
    (FedAvg) the bodies are one every round."""
    for alpha, rounds in ((3, 7), (1, 2)):
        for rnd, strategy, own in drive(alpha, rounds, golden_data, first_one_step=False):
            server_round = rnd + alpha
            for key in strategy.head_keys + ["lm.model.decoder.embed_tokens.weight"]:
                assert all(torch.equal(o[key], own[0][key]) for o in own[1:]), (alpha, rnd, key)
            same = [all(torch.equal(o[k], own[0][k]) for o in own[1:]) for k in strategy.body_keys]
            # between body rounds the bodies differ (the attention's key biases get no gradient: a softmax
            # ignores a shift common to all keys, so those stay equal)
            assert all(same) if server_round % alpha == 0 else not all(same), (alpha, rnd)
            if server_round % alpha == 0:
                assert strategy.body_round == server_round


@pytest.mark.parametrize("alpha,billions,authors_billions", [(1, 1001.914, 1310.786), (10, 480.241, 511.128)])
def test_table2_parameters_per_client_opt125m(alpha, billions, authors_billions):
    """Table 2's count for the OPT-125M cut: parameters a client receives plus sends in 2x10^4
    iterations (tau = 5: 4000 rounds), the head every round and the body every alpha rounds, both ways.
    Asserted: the count of what our records carry, every state entry of the part, OPT's tied token
    embedding (50,272 x 768 = 38.6M entries) once, in the head; alpha = 1 is FedAvg's count, whose whole
    state names the tied tensor once too (125,239,296 parameters a round each way: 1001.914B); and beside
    it the count with that tensor also in the body, as the authors' layer groups send it (their
    embed_tokens and lm_head). The split comes from the
    full-width model on the meta device (no memory); the per-round traffic of this split is what the
    strategy's records carry (test_fedavg_and_fedals_run_on_shakespeare_pairs_and_resume counts it on a run)."""
    with torch.device("meta"):
        model = opt125m_random_rows((128,), 10, vocab_size=4414, seq_len=128)  # OPT-125M's 50,272 rows
    assert model.pad_id == model.lm.config.pad_token_id == 4413
    cfg = parse_run_config({"strategy": "fedals", "model": "fedapp.core.llm:opt125m_random_rows"})
    body, head = FedALS.body_head(cfg, model)
    sd = model.state_dict()
    assert sum(p.numel() for p in model.parameters()) == 125_239_296  # OPT-125M's 50,272 x 768 embedding, tied
    n_body, n_head = (sum(sd[k].numel() for k in part) for part in (body, head))
    tied = sd["lm.model.decoder.embed_tokens.weight"].numel()
    assert (n_body, n_head, tied) == (72_454_656, 52_784_640, 38_608_896)
    assert n_body + n_head == sum(p.numel() for p in model.parameters()) == sum(v.numel() for v in sd.values())
    rounds = 20_000 // 5

    def count(body):
        return round((2 * rounds * n_head + 2 * (rounds // alpha) * body) / 1e9, 3)
    assert (count(n_body), count(n_body + tied)) == (billions, authors_billions)


@needs_plays
def test_fedavg_and_fedals_run_on_shakespeare_pairs_and_resume(tmp_path, monkeypatch):
    """FedAvg and FedALS (alpha 2) run through the ServerApp on shakespeare-pairs with the random OPT,
    AdamW and the schedule: the test loss falls, the records carry the head every round and the body
    on body rounds; FedALS stopped after round 1 and resumed (its clients' bodies, AdamW moments and t
    in their states) ends as the uninterrupted run."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    from fedapp.runtime.client_app import app

    base = {"dataset": "shakespeare-pairs", "data-dir": str(SHARED_DATA), "model": "fedapp.core.llm:opt_tiny",
            "num-clients": 5, "partition": "label-sorted", "num-server-rounds": 2, "local-steps": 2, "eval-every": 2,
            "batch-size": 4, "lr": 0.05, "optimizer": "adamw", "lr-schedule": "fedals-inverse", "fedals.alpha": 2,
            "fraction-evaluate": 0.0, "test-fraction": 0.0, "results-dir": str(tmp_path), "seed": 1}
    runs = {s: run_local({**base, "strategy": s, "run-name": s}) for s in ("fedavg", "fedals")}
    for s, strategy in runs.items():
        losses = [row["central-loss"] for row in strategy.history if row.get("central-loss") is not None]
        assert losses[-1] < losses[0], (s, losses)
    rows = [r for r in runs["fedals"].history if r["round"] > 0]
    body, head = FedALS.body_head(runs["fedals"].cfg, runs["fedals"].model)
    sizes = {k: v.numel() for k, v in runs["fedals"].model.state_dict().items()}
    n_head, n_body = sum(sizes[k] for k in head), sum(sizes[k] for k in body)
    assert [r["train-params-up"] for r in rows] == [5 * n_head, 5 * (n_head + n_body)]
    cut = {**base, "strategy": "fedals", "run-name": "cut", "num-server-rounds": 1}
    grid = InProcessGrid(app, 5, cut)
    run_local(cut, grid=grid)
    resumed_config = {**cut, "num-server-rounds": 2, "resume-from": str(tmp_path / "cut")}
    grid2 = InProcessGrid(app, 5, resumed_config)
    for node, ctx in grid2.contexts.items():
        ctx.state = grid.contexts[node].state  # the clients kept theirs
    resumed = run_local(resumed_config, grid=grid2)
    assert resumed.history[-1]["central-loss"] == runs["fedals"].history[-1]["central-loss"]
    for k, v in runs["fedals"].global_state.items():
        assert torch.equal(resumed.global_state[k], v), k


@pytest.mark.skipif(not GOLDEN.is_file(), reason="the authors' golden numbers are not stored")
def test_matches_authors_fedals_llm(golden_data):
    """FedAvg and FedALS on the random OPT against the authors' LLM path (simulations/fedals/
    authors_golden_llm.py ran their DSGDAlg.parallel_sgd_layer): 5 clients, tau = 2, alpha = 3, L = 11,
    their AdamW (optimizer = 'adamw-authors', eps 1e-6, no weight decay) with eta / (t/100 + 10), the
    same initial model, tokenizer and batches. Their loop averages after iteration 0 (one step) and then
    every tau / alpha tau iterations: round 0 here is a one-step round that averages everything, then
    rounds of tau steps. Compared: the averaged model and client 0's model after 1, 5, 7 and 13
    iterations (rounds 0, 2, 3, 6; round 2 is between body averages), and their test loss of the
    averaged model (one batch of 8 prompts: the mean next-token loss, padding positions included)."""
    golden = json.loads(GOLDEN.read_text())
    tok, _, test_x = golden_data
    assert golden["vocab"] == len(tok)
    assert list(tiny_model(len(tok)).lm.state_dict()) == golden["state_keys"]
    rounds = {(c - 1) // SETTING["tau"]: i for i, c in enumerate(CHECKPOINTS)}
    assert rounds == {0: 0, 2: 1, 3: 2, 6: 3}
    model = tiny_model(len(tok))
    for name, alpha in (("fedavg", 1), ("fedals", SETTING["alpha"])):
        for rnd, strategy, own in drive(alpha, max(rounds) + 1, golden_data, first_one_step=True):
            if rnd not in rounds:
                continue
            want = golden[name][rounds[rnd]]
            averaged = weighted_mean(own, [1.0] * len(own))
            model.load_state_dict(averaged)
            np.testing.assert_allclose(summary(averaged), want["averaged"], rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} round {rnd} averaged")
            np.testing.assert_allclose(summary(own[0]), want["node0"], rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} round {rnd} node 0")
            assert evaluate_lm(model, test_x, "cpu")["loss"] == pytest.approx(want["test_loss"], rel=1e-5)
    for i in range(1, len(CHECKPOINTS)):
        assert not np.allclose(golden["fedavg"][i]["averaged"], golden["fedals"][i]["averaged"], rtol=1e-4, atol=1e-4)


def test_cpu_run_on_the_page_is_its_committed_summary():
    """The page's CPU-run table is printed from the committed summary, and both runs reached 300
    iterations with the 5 clients' traffic the summary states (FedALS about half of FedAvg's)."""
    from simulations.fedals.llm_summary import SUMMARY, page_table

    summary = json.loads(SUMMARY.read_text())
    page = (SUMMARY.parents[2] / "README.md").read_text()
    assert page_table(summary) in page
    runs = summary["runs"]
    assert [e["iteration"] for e in runs["fedavg"]["evaluations"]] == list(range(0, 301, 50))
    assert [e["iteration"] for e in runs["fedals"]["evaluations"]] == list(range(0, 301, 50))
    sent = runs["fedals"]["train-params-up-all-clients"] / runs["fedavg"]["train-params-up-all-clients"]
    assert sent == pytest.approx(0.517, abs=1e-3)
    assert "FedALS 55.8M, FedAvg 107.8M (52%)" in page
