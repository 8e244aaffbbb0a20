"""One real `flwr run` simulation (Ray, local SuperLink) through the launcher."""

import json
import subprocess
import time

from fedapp.launch import launch


def test_flwr_run_simulation_completes_and_writes_results(tmp_path):
    results = tmp_path / "results"
    status = launch(f"num-server-rounds=2 num-clients=4 local-steps=5 results-dir='{results}' run-name='r'",
                    home=tmp_path / "flwr-home", port_base=39390, stream=False, timeout=300)
    assert status["status"] == "finished:completed"
    doc = json.loads((results / "r" / "rounds.json").read_text())
    assert [r["round"] for r in doc["rounds"]] == [0, 1, 2]
    assert doc["rounds"][-1]["replies"] == 4
    assert 0.0 < doc["rounds"][-1]["fed-accuracy"] <= 1.0
    # the launcher stopped the SuperLink it started, and nothing started another one since
    time.sleep(3)
    ps = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    assert str(tmp_path / "flwr-home") not in ps


def test_flwr_run_bad_config_fails_before_training(tmp_path):
    status = launch("model='vgg'", home=tmp_path / "flwr-home", port_base=39390, stream=False, timeout=120)
    assert status["status"] == "finished:failed"
