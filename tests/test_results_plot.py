"""The accuracy plot of a run's results folder."""

import warnings

from fedapp.runtime.results import plot_series


def test_a_plot_before_the_first_evaluation_is_written_without_a_legend_warning(tmp_path):
    rows = [{"round": 0, "train-loss": 2.3}, {"round": 1, "train-loss": 2.1}]  # no accuracy yet (eval-every > 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_series([("central-accuracy", rows, "central-accuracy")], tmp_path / "empty.png")
        plot_series([("fedavg", rows + [{"round": 2, "central-accuracy": 0.4}], "central-accuracy")],
                    tmp_path / "one.png")
    assert (tmp_path / "empty.png").read_bytes()[:4] == (tmp_path / "one.png").read_bytes()[:4] == b"\x89PNG"


def test_the_plot_is_redrawn_at_most_every_plot_every_s_and_after_the_last_round(tmp_path, monkeypatch):
    """rounds.json is rewritten every round; plot.png, which costs the server's thread 0.2-0.5 s, only
    once PLOT_EVERY_S has passed since the last drawing, and always after the last round."""
    import json

    from fedapp.runtime import results
    from fedapp.runtime.registry import parse_run_config

    clock = [1000.0]
    monkeypatch.setattr(results.time, "time", lambda: clock[0])
    drawn = []
    monkeypatch.setattr(results, "plot", lambda rows, path, title="": drawn.append(rows[-1]["round"]))
    cfg = parse_run_config({"num-server-rounds": 8, "results-dir": str(tmp_path), "run-name": "r"})
    writer = results.ResultsWriter(cfg)
    for rnd, seconds in enumerate([0, 2, 2, 30, 2, 2, 40, 2, 2]):  # seconds since the round before
        clock[0] += seconds
        writer.add({"round": rnd, "train-loss": 1.0})
        assert [r["round"] for r in json.loads((writer.path / "rounds.json").read_text())["rounds"]] == list(range(rnd + 1))
    assert drawn == [3, 6, 8]  # 34 s and 44 s after the last drawing, then the last round
    assert results.PLOT_EVERY_S == 30.0
