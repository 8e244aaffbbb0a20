"""The authors' train.py (jonnyascott/PeFLL) on the ``vs-authors`` setting, and its runs condensed into
``summaries/vs-authors/cifar10-100c/authors.json``.

    python simulations/pefll/authors_runs.py run --src <authors' checkout> --python <their venv's python> \
        --data <folder with cifar-10-batches-py> --out OUT --seeds 0 1 [--masked] [--steps 100 --eval-every 100]
    python simulations/pefll/authors_runs.py condense OUT [OUT ...]

``run`` (``--src``, ``--python``, ``--data`` default to ``$PEFLL_SRC``, ``$PEFLL_PY``, ``$PEFLL_DATA``):
one run a seed, their code unmodified from a scratch copy ``OUT/<unmasked|masked>-s<seed>/``, every
argument at their default (CIFAR-10, 100 clients of which 90 train, 2 classes each, 5 clients a step,
50 inner steps, Adam 2e-4, l = 1 + n/4) except the steps, the evaluation cadence, the seed and
``--mask-absent`` (False unless ``--masked``: Table 1 is unmasked). One torch thread; torchvision's
MD5 check of the CIFAR files is reduced to "the file exists" (a locally converted copy cannot match the
official checksums), the only change around their code. Their code evaluates after the first step,
every ``eval-every`` steps and after the last one.

``condense`` reads each run's results file (their ``--save-path`` JSON: pooled seen and new clients'
test accuracy per evaluation) into authors.json, one row a seed (the rows of seeds not in OUT stay): the
unmasked run's seen accuracy as the value (its curve over the evaluated steps), ``more`` with the new
clients' and, where a masked run of that seed exists, both masked accuracies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AUTHORS_JSON = HERE / "summaries" / "vs-authors" / "cifar10-100c" / "authors.json"
# their train.py run as __main__ in their checkout, one torch thread, the CIFAR files' MD5 check relaxed
SHIM = """
import os, runpy, sys
import torch
import torchvision.datasets.cifar as cifar
torch.set_num_threads(1)
cifar.check_integrity = lambda fpath, md5=None: os.path.isfile(fpath)
cifar.CIFAR10.download = lambda self, *a, **k: None
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""


def evaluated_steps(steps: int, eval_every: int) -> list[int]:
    """The steps after which train.py evaluates: its loop index i = 0..steps-1 when i % eval_every == 0,
    and the last index if that was not one of them; index i is after i + 1 steps."""
    idx = [i for i in range(steps) if i % eval_every == 0]
    return [i + 1 for i in idx + ([steps - 1] if idx[-1] != steps - 1 else [])]


def run(args: argparse.Namespace) -> None:
    for key, value in (("--src", args.src), ("--python", args.python), ("--data", args.data)):
        if not value:
            raise SystemExit(f"{key}: not given (nor its environment variable)")
    if not (Path(args.src) / "train.py").is_file():
        raise SystemExit(f"--src: {args.src} has no train.py (not the authors' checkout)")
    if not (Path(args.data) / "cifar-10-batches-py" / "data_batch_1").is_file():
        raise SystemExit(f"--data: {args.data} has no cifar-10-batches-py/")
    tag = "masked" if args.masked else "unmasked"
    for seed in args.seeds:
        folder = args.out / f"{tag}-s{seed}"
        if (folder / "run.json").exists():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(args.src, folder / "PeFLL", ignore=shutil.ignore_patterns(".git"))
        argv = ["--data-name", "cifar10", "--data-path", "DATA", "--num-nodes", "100", "--num-train-nodes", "90",
                "--num-steps", str(args.steps), "--eval-every", str(args.eval_every), "--save-path", "RESULTS",
                "--seed", str(seed), "--mask-absent", str(args.masked)]
        real = {"DATA": str(Path(args.data).resolve()), "RESULTS": str((folder / "results").resolve())}
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        t0 = time.time()
        with open(folder / "train.log", "w") as log:
            rc = subprocess.run([args.python, "-c", SHIM, *[real.get(a, a) for a in argv]], cwd=folder / "PeFLL",
                                env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc:
            raise SystemExit(f"seed {seed}: train.py exited with {rc} (see {folder / 'train.log'})")
        (folder / "run.json").write_text(json.dumps({
            "seed": seed, "mask_absent": args.masked, "steps": args.steps, "eval_every": args.eval_every,
            "seconds": round(time.time() - t0, 1), "command": "train.py " + " ".join(argv)}, indent=1))


def read_run(folder: Path) -> dict:
    """One run: its settings (run.json) and, per evaluation, the seen and new clients' test accuracy."""
    meta = json.loads((folder / "run.json").read_text())
    (results,) = (folder / "results").glob("*.json")
    doc = json.loads(results.read_text())
    steps = evaluated_steps(meta["steps"], meta["eval_every"])
    seen, new = doc["train_nodes"]["test_avg_acc"], doc["test_nodes"]["test_avg_acc"]
    if not len(seen) == len(new) == len(steps):
        raise SystemExit(f"{results}: {len(seen)} evaluations, expected {len(steps)} (steps {steps})")
    return meta | {"curve": [[s, round(a, 6)] for s, a in zip(steps, seen)],
                   "curve_new": [[s, round(a, 6)] for s, a in zip(steps, new)]}


def condense(outs: list[Path], rows: list[dict]) -> dict:
    """authors.json: one row a seed (method pefll), ``rows`` (the file's current rows) updated with the
    unmasked and masked runs in ``outs``."""
    by_seed = {r["seed"]: r for r in rows}
    runs = [read_run(f) for out in outs for f in sorted(out.glob("*masked-s*")) if (f / "run.json").exists()]
    for r in sorted(runs, key=lambda r: r["mask_absent"]):  # a seed's unmasked run makes its row
        seed = r["seed"]
        if not r["mask_absent"]:
            more = {k: v for k, v in by_seed.get(seed, {}).get("more", {}).items() if k.endswith("-masked")}
            by_seed[seed] = {"run": f"pefll-s{seed}", "method": "pefll", "seed": seed, "seconds": r["seconds"],
                             "value": r["curve"][-1][1], "rounds": r["steps"], "curve": r["curve"],
                             "more": {"new": r["curve_new"][-1][1], **more}, "curve_new": r["curve_new"],
                             "command": r["command"]}
        else:  # a seed run masked only has no value (the unmasked seen accuracy)
            row = by_seed.setdefault(seed, {"run": f"pefll-s{seed}", "method": "pefll", "seed": seed, "seconds": None,
                                            "value": None, "rounds": r["steps"], "curve": [], "more": {}})
            row["more"] |= {"seen-masked": r["curve"][-1][1], "new-masked": r["curve_new"][-1][1]}
            row |= {"masked_command": r["command"], "masked_seconds": r["seconds"]}
    return {"paper": "pefll", "table": "vs-authors", "column": "cifar10-100c", "scale": "cpu",
            "rows": [by_seed[s] for s in sorted(by_seed)]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run their train.py, one run a seed")
    r.add_argument("--src", default=os.environ.get("PEFLL_SRC"), help="their checkout (default: $PEFLL_SRC)")
    r.add_argument("--python", default=os.environ.get("PEFLL_PY"), help="their venv's python (default: $PEFLL_PY)")
    r.add_argument("--data", default=os.environ.get("PEFLL_DATA"),
                   help="folder holding cifar-10-batches-py (default: $PEFLL_DATA)")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seeds", type=int, nargs="+", required=True)
    r.add_argument("--masked", action="store_true", help="--mask-absent True (their default); Table 1: unmasked")
    r.add_argument("--steps", type=int, default=100)
    r.add_argument("--eval-every", type=int, default=100)
    c = sub.add_parser("condense", help=f"write {AUTHORS_JSON.relative_to(HERE.parents[1])} from run folders")
    c.add_argument("outs", type=Path, nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "run":
        run(args)
        return
    from simulations.tables import dumps, read_rows

    AUTHORS_JSON.parent.mkdir(parents=True, exist_ok=True)
    AUTHORS_JSON.write_text(dumps(condense(args.outs, read_rows(AUTHORS_JSON))))
    print(f"wrote {AUTHORS_JSON}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1]))
    main()
