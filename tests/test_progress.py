"""What a run tells its user while it runs: round k/N with time, resume notice, the final line."""

import json

from fedapp.runtime.inprocess import run_local


def test_progress_resume_notice_and_final_line(tmp_path, caplog, small_config):
    caplog.set_level("INFO", logger="flwr")
    run_local({**small_config, "num-server-rounds": 2})
    folder = tmp_path / "results" / "t"
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("round 2/2 | elapsed ") and " s left" in line for line in lines)
    rows = json.loads((folder / "rounds.json").read_text())["rounds"]
    final = f"central-accuracy {rows[-1]['central-accuracy']:.4f}"
    assert lines[-1].startswith("done: 2 rounds in ") and final in lines[-1] and lines[-1].endswith(str(folder))
    assert (folder / "plot.png").stat().st_size > 0
    caplog.clear()
    run_local({**small_config, "num-server-rounds": 3, "resume-from": str(folder)})
    lines = [r.getMessage() for r in caplog.records]
    assert f"resuming from {folder}: rounds 1-2 restored, continuing with round 3 of 3" in lines
