"""The side-by-side benchmark's bookkeeping: how it reads the seconds of a round's training and of an
evaluation from fedapp's rows and from the authors' PeFLL log, and the memory of a whole process tree
(no timing is asserted; the benchmark itself is `python -m simulations.bench.side_by_side`)."""

import sys

import pytest

from simulations.bench.side_by_side import (SETTINGS, fedapp_config, fedapp_rounds, fl_simulator_rounds, main, measured,
                                            pefll_step_times)
from simulations.bench.startup import role


def test_fedapp_rounds_split_training_from_evaluation():
    rows = [{"round": 0, "wall-time": 0.0},
            {"round": 1, "train-seconds": 9.0, "round-seconds": 30.0, "fed-accuracy": 0.5},  # first: warm-up
            {"round": 2, "train-seconds": 4.0, "round-seconds": 4.5},
            {"round": 3, "train-seconds": 5.0, "round-seconds": 27.0, "fed-seen-accuracy": 0.6}]
    out = fedapp_rounds(rows)
    assert out["train_round_s"] == 4.5 and out["train_rounds_s"] == [4.0, 5.0]
    assert out["evals_s"] == [21.0, 22.0] and out["eval_s"] == 21.5
    # the server's own evaluation counts too, and a round's training per client that replied
    rows = [{"round": 1, "train-seconds": 9.0, "round-seconds": 12.0, "replies": 10, "central-accuracy": 0.1},
            {"round": 2, "train-seconds": 8.0, "round-seconds": 11.0, "replies": 10, "central-accuracy": 0.2},
            {"round": 3, "train-seconds": 6.0, "round-seconds": 9.5, "replies": 5, "central-accuracy": 0.3}]
    out = fedapp_rounds(rows)
    assert out["evals_s"] == [3.0, 3.0, 3.5] and out["train_round_s"] == 7.0 and out["train_client_s"] == 1.0


def test_fl_simulator_rounds_take_the_test_out_of_the_round_time(tmp_path):
    # FL-Simulator's per-round lines as tslog stamps them, with the shim's timer of Server._test_ on stderr
    log = tmp_path / "flsim.log"
    rounds = [(7, 30.0, 100.0), (7, 31.0, 87.0), (11, 30.0, 129.0)]  # clients, _test_ seconds, round Time
    log.write_text("".join(
        f"{10.0 * k:.3f}\t============= Communication Round {k + 1} =============\n"
        f"{10.0 * k + 1:.3f}\tSelected Clients: {', '.join(str(i) for i in range(n))}\n"
        f"{10.0 * k + 2:.3f}\t   Train    ----    Loss: 2.3000,   Accuracy: 0.1000\n"
        f"{10.0 * k + 3:.3f}\t[anchor-timer] server.server:Server._test_ dt={test:.4f}\n"
        f"{10.0 * k + 4:.3f}\t            ----    Time: {time:.2f}s\n" for k, (n, test, time) in enumerate(rounds)))
    out = fl_simulator_rounds(log)
    assert out["clients_per_round"] == [7, 7, 11] and out["train_rounds_s"] == [56.0, 99.0]
    assert out["train_round_s"] == 77.5 and out["train_client_s"] == pytest.approx((8.0 + 9.0) / 2)
    assert out["eval_s"] == 30.0


def test_pefll_step_times_from_the_stamped_progress_bar(tmp_path):
    # tslog.py's stamps; steps 1-5 take 2 s, step 3 -> 4 also evaluates (20 s more)
    stamps = {0: 1.0, 1: 3.0, 2: 5.0, 3: 7.0, 4: 29.0, 5: 31.0}
    log = tmp_path / "pefll.log"
    log.write_text("".join(f"{t:.3f}\t 40%|####   | {s}/5 [00:0{s}<00:03]\n{t + 0.5:.3f}\t{s}/5 repeated\n"
                           for s, t in stamps.items()))
    assert pefll_step_times(log) == {"train_round_s": 2.0, "eval_s": 20.0}


def test_settings_are_the_reproductions_and_a_run_is_its_whole_process_tree(tmp_path):
    cfg = fedapp_config("hcct", 2, 3)
    assert (cfg["model"], cfg["partition"], cfg["num-server-rounds"], cfg["eval-every"], cfg["seed"]) == (
        "hcct-cnn", "hcct-shards", 2, 1, 3)
    assert fedapp_config("pefll", 20, 0)["eval-every"] == 20 and set(SETTINGS) == {"hcct", "pefll", "fedsmoo", "fedals"}
    # FedSMOO: the anchors' FL-Simulator configuration (1 local epoch), evaluated every round as theirs
    cfg = fedapp_config("fedsmoo", 3, 20)
    assert (cfg["model"], cfg["local-epochs"], cfg["fraction-train"], cfg["batch-size"], cfg["eval-every"]) == (
        "resnet18gn", 1, 0.1, 50, 1)
    assert fedapp_config("fedsmoo", 3, 20, {"reply-memory-mb": 1.0})["reply-memory-mb"] == 1.0  # --set
    cfg = fedapp_config("fedals", 10, 0)
    assert (cfg["model"], cfg["num-clients"], cfg["local-steps"], cfg["fedals.alpha"], cfg["eval-every"]) == (
        "resnet20", 5, 5, 10, 10)
    # a parent holding 50 MB and a child holding 120 MB at the same time: the tree's peak is their sum;
    # then a forked child that shares the parent's 200 MB adds only its own pages (PSS, not RSS)
    hold = "import time; b = bytearray({} * 2**20); time.sleep(1.5)"
    code = f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {hold.format(120)!r}]); {hold.format(50)}; p.wait()"
    run = measured([sys.executable, "-c", code])
    assert run["rc"] == 0 and 170 < run["peak_pss_mib"] < 260
    assert sum(run["peak_pss_by_process_mib"].values()) == pytest.approx(run["peak_pss_mib"], abs=0.2)
    forked = ("import os, time; b = bytearray(200 * 2**20); pid = os.fork(); time.sleep(1.5); "
              "os._exit(0) if pid == 0 else os.waitpid(pid, 0)")
    run = measured([sys.executable, "-c", forked])
    assert run["rc"] == 0 and 200 < run["peak_pss_mib"] < 260  # an RSS sum would say over 400


def test_processes_are_named_without_the_machines_folders():
    # the raw lines are committed: a process is its role, or its command line with each absolute path cut to
    # its last part
    assert role("/a/venv/bin/python /b/anchors/shim_run.py --dataset cifar") == "python shim_run.py --dataset cifar"
    assert role("bash -c /a/venv/bin/python /b/x.py") == "bash -c python x.py"
    assert role("/a/.venv/bin/python /a/.venv/bin/flwr-simulation --app x") == "simulation"
    assert len(role("python " + "x" * 100)) == 60


def test_authors_code_needs_the_anchors_environment_before_anything_runs(monkeypatch):
    for key in ("ANCHOR_PY", "ANCHOR_SRC", "ANCHOR_DATA", "ANCHOR_WORK"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit, match="the authors' code needs ANCHOR_PY, ANCHOR_SRC, ANCHOR_DATA, ANCHOR_WORK"):
        main(["hcct"])
    with pytest.raises(SystemExit, match="the authors' code needs"):
        main(["fedals", "--engines", "in-process", "authors"])
