"""Writes the example's small made-up dataset, data/train.csv and data/test.csv: three kinds of plant
told apart by four measurements and a colour, measured at four sites.

    python examples/own-model/make_data.py
"""

import csv
from pathlib import Path

import numpy as np

KINDS = ("fern", "moss", "reed")
COLOURS = ("green", "brown", "yellow")
SITES = ("north", "south", "east", "west")


def rows(n: int, rng: np.random.Generator) -> list[dict]:
    centres = np.array([[2.0, 0.5, 1.0, 4.0], [0.5, 2.0, 3.0, 1.0], [3.0, 3.0, 0.5, 2.0]])
    out = []
    for _ in range(n):
        site = int(rng.integers(len(SITES)))
        # each site sees the kinds in its own proportions: the sites' data differ, as real sites' do
        kind = int(rng.choice(3, p=np.roll([0.6, 0.25, 0.15], site)))
        x = centres[kind] + rng.normal(0, 0.6, 4)
        colour = COLOURS[kind] if rng.random() < 0.7 else COLOURS[int(rng.integers(3))]
        out.append({"height": round(x[0] * 10, 1), "width": round(x[1] * 5, 2), "leaves": int(max(0, x[2] * 4)),
                    "wetness": round(x[3], 3), "colour": colour, "site": SITES[site], "kind": KINDS[kind]})
    return out


def main() -> None:
    rng = np.random.default_rng(7)
    folder = Path(__file__).parent / "data"
    folder.mkdir(exist_ok=True)
    for name, n in (("train", 400), ("test", 100)):
        data = rows(n, rng)
        with open(folder / f"{name}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, list(data[0]))
            writer.writeheader()
            writer.writerows(data)


if __name__ == "__main__":
    main()
