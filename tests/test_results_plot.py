"""The accuracy plot of a run's results folder."""

import warnings

from fedapp.results import plot_series


def test_a_plot_before_the_first_evaluation_is_written_without_a_legend_warning(tmp_path):
    rows = [{"round": 0, "train-loss": 2.3}, {"round": 1, "train-loss": 2.1}]  # no accuracy yet (eval-every > 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_series([("central-accuracy", rows, "central-accuracy")], tmp_path / "empty.png")
        plot_series([("fedavg", rows + [{"round": 2, "central-accuracy": 0.4}], "central-accuracy")],
                    tmp_path / "one.png")
    assert (tmp_path / "empty.png").read_bytes()[:4] == (tmp_path / "one.png").read_bytes()[:4] == b"\x89PNG"
