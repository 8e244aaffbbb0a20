"""Text as token ids: the built-in character tokenizer, and LEAF's Shakespeare task from the raw plays.

Token ids are stored in the smallest signed integer type that holds the vocabulary (int8 for
Shakespeare's characters), so the 4 M windows of 80 characters take 1 byte each; ``prepare`` turns
any integer tensor but uint8 (images) into int64 ids for the model. Id 0 is padding, 1 an unknown
character.
"""

from __future__ import annotations

import re
import tarfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

PAD, UNK = 0, 1
#: LEAF's Shakespeare: 80-character windows, each labelled with the character after it
SHAKESPEARE_WINDOW = 80
#: LEAF's split of each role's windows: the first 90% train, the test windows start a window later
SHAKESPEARE_TRAIN_FRACTION = 0.9
#: LEAF's 80 characters (its language_utils' ALL_LETTERS): a fixed vocabulary, so every site's plays
#: give the same ids and the same model; any other character is unknown
LEAF_ALPHABET = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
# A speaker turn opens, after a blank line, with a line holding only the name (of at most four words)
# and a period ("Ham.", "First Clown.", "CLEOPATRA."); act and scene headings are not names.
_SPEAKER = re.compile(r"^(?!(?:ACT|Act|SCENE|Scene)\b)([A-Z][A-Za-z'\-]*(?: [A-Za-z'\-]+){0,3})\.$")
# The play proper opens with its first act, induction or prologue heading (the cast list comes before).
_OPENING = re.compile(r"^(?:ACT|Act|INDUCTION|Induction|PROLOGUE|Prologue)\b")


def token_dtype(vocab_size: int) -> torch.dtype:
    """The smallest signed integer type holding ids below ``vocab_size``."""
    return next(t for t in (torch.int8, torch.int16, torch.int32) if vocab_size <= torch.iinfo(t).max + 1)


class CharTokenizer:
    """Character ids over ``chars`` (default: the training texts' characters, sorted), after padding
    and unknown."""

    def __init__(self, texts=(), chars: str | None = None) -> None:
        self.chars = list(chars) if chars is not None else sorted(set("".join(texts)))
        self.index = {c: i + 2 for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 2

    def encode(self, texts, seq_len: int) -> torch.Tensor:
        """(N, seq_len) ids: each text cut to ``seq_len`` characters or right-padded with ``PAD``."""
        out = np.zeros((len(texts), seq_len), dtype=np.int64)
        for i, text in enumerate(texts):
            ids = [self.index.get(c, UNK) for c in text[:seq_len]]
            out[i, :len(ids)] = ids
        return torch.from_numpy(out).to(token_dtype(self.vocab_size))


def text_arrays(train_texts, test_texts, seq_len: int) -> dict:
    """Token ids of both splits from a tokenizer of the training texts; ``seq_len`` 0: the longest
    training text."""
    tok = CharTokenizer(train_texts)
    seq_len = seq_len or max(1, max((len(t) for t in train_texts), default=1))
    return {"train_x": tok.encode(train_texts, seq_len), "test_x": tok.encode(test_texts, seq_len),
            "vocab_size": tok.vocab_size}


# --------------------------------------------------------------------------- Shakespeare (LEAF)


def _plays(path: Path):
    """(play name, text) of every play in the archive or folder ``path``."""
    if path.is_file():
        with tarfile.open(path, "r:*") as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                if member.isfile() and member.name.endswith(".txt"):
                    yield Path(member.name).stem, tar.extractfile(member).read().decode("utf-8", "replace")
        return
    for file in sorted(path.glob("*.txt")):
        yield file.stem, file.read_text("utf-8", "replace")


def speaking_roles(text: str) -> dict[str, list[str]]:
    """The lines of each speaking role of one play: from the first act (induction, prologue) heading
    on, a turn is the speaker's line (a name and a period, after a blank line) and the lines after it
    up to a blank line; stage directions ('[' up to ']', over several lines too) are not speech. Names
    are upper-cased, as LEAF does (one role may be spelt in several casings)."""
    roles: dict[str, list[str]] = defaultdict(list)
    lines = [raw.strip() for raw in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if _OPENING.match(line)), len(lines))
    speaker, previous, direction = None, "", False
    for line in lines[start:]:
        if direction or line.startswith("["):
            direction = "]" not in line
        elif not line:
            speaker = None
        elif speaker is None:
            m = _SPEAKER.match(line)
            speaker = m.group(1).upper() if m and not previous else None
        else:
            roles[speaker].append(line)
        previous = line
    return roles


def derive_shakespeare(path: Path) -> dict:
    """LEAF's Shakespeare next-character task (Caldas et al. 2018) from the raw plays: one client per
    speaking role of a play, roles with at most 2 lines dropped (LEAF's filter: a train and a test line),
    a role's lines joined by spaces (runs of spaces made one), every 80-character window an example
    labelled with the next character, the ids those of LEAF's 80 characters; the first 90% of a role's
    windows train, its test windows start 79 characters after them, so no test window overlaps a
    training one (LEAF's split by sample)."""
    texts, names = [], []
    for play, content in _plays(path):
        for role, lines in speaking_roles(content).items():
            if len(lines) > 2:
                texts.append(re.sub(r"  +", " ", " ".join(lines)))
                names.append(f"{play}/{role}")
    if not texts:
        raise FileNotFoundError(f"no speaking roles found in {path}")
    tok = CharTokenizer(chars=LEAF_ALPHABET)
    parts: dict[str, list] = {f"{s}_{k}": [] for s in ("train", "test") for k in ("x", "y", "client")}
    roles = []
    w = SHAKESPEARE_WINDOW
    for text, name in zip(texts, names):
        n = len(text) - w
        if n < 1:
            continue
        ids = np.array([tok.index.get(c, UNK) for c in text], dtype=np.int8)
        windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], w)  # windows[i] = ids[i:i+w], label ids[i+w]
        n_train = max(1, int(SHAKESPEARE_TRAIN_FRACTION * n))
        for split, idx in (("train", np.arange(n_train)), ("test", np.arange(n_train + w - 1, n))):
            parts[f"{split}_x"].append(windows[idx])
            parts[f"{split}_y"].append(ids[idx + w].astype(np.int64))
            parts[f"{split}_client"].append(np.full(len(idx), len(roles), dtype=np.int64))
        roles.append(name)
    arrays = {k: torch.from_numpy(np.concatenate(v)) for k, v in parts.items()}
    arrays.update(num_classes=tok.vocab_size, vocab_size=tok.vocab_size, roles=roles, chars="".join(tok.chars),
                  mean=[], std=[])
    return arrays


def select_roles(arrays: dict, num_clients: int, seed: int) -> dict:
    """``num_clients`` roles drawn by ``seed`` (all of them when it is 0 or their number), their ids
    renumbered 0.. in the roles' order."""
    n = len(arrays["roles"])
    if num_clients > n:
        raise ValueError(f"num-clients = {num_clients} exceeds the {n} speaking roles of shakespeare")
    if num_clients in (0, n):  # every role: the cached (memory-mapped) tensors as they are
        return arrays
    keep = np.sort(np.random.default_rng(seed).choice(n, num_clients, replace=False))
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[keep] = np.arange(len(keep))
    out = dict(arrays, roles=[arrays["roles"][i] for i in keep])
    for split in ("train", "test"):
        client = arrays[f"{split}_client"].numpy()
        rows = torch.from_numpy(np.flatnonzero(new_id[client] >= 0))
        out[f"{split}_x"] = arrays[f"{split}_x"][rows]
        out[f"{split}_y"] = arrays[f"{split}_y"][rows]
        out[f"{split}_client"] = torch.from_numpy(new_id[client[rows.numpy()]])
    return out
