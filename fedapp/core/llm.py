"""OPT language models and sentence-pair prompts: FedALS's language-model row (Gholami and Seferoglu,
Table 1: OPT-125M fine-tuned on MultiNLI by 5 clients; Appendix E.2), following the authors' code
(github Peyman-gholami/FedALS) where the paper is silent.

The task, as their ``form_training_prompts`` and ``logistic_regression`` define it: each sentence pair
becomes the prompt ``mnli hypothesis: <h> premise: <p> target: <label><|endoftext|>``, tokenized with
OPT's tokenizer plus an added ``[PAD]`` token, cut to 128 tokens and right-padded to the longest prompt
of its batch; the loss is the mean next-token cross-entropy over every position of the batch, padding
positions included, and Table 1's test loss the mean of that loss over test batches of 32.

Data: token ids (N, 128) right-padded with ``[PAD]``, the last id of the vocabulary (``vocab_size - 1``);
the label of an example is its genre (MultiNLI's genre, or the play of ``shakespeare-pairs``), which the
partitioners split by: ``partition='iid'`` or the genre-sorted ``partition='label-sorted'`` (the paper's
non-IID split).

Needs the optional extra ``llm`` (``pip install -e '.[llm]'``: transformers, tokenizers).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

OPT_ID = "facebook/opt-125m"  # the authors load opt-1.3b (8-bit) and opt-6.7b's tokenizer; the paper: OPT-125M
MNLI_ID = "nyu-mll/multi_nli"  # "multi_nli" in the authors' code (the hub's older name)
SEQ_LEN = 128  # the authors' tokenizer max_length
OPT_ROWS = 50_272  # OPT-125M's embedding rows (its tokenizer's 50,265 tokens, padded to a multiple of 8)
HEAD_LAYERS = 2  # Table 5: the body is the first 10 of OPT-125M's 12 decoder layers, the head the last 2
EVAL_BATCH = 32  # the authors' test loader: Table 1's test loss is a mean over batches of 32
#: the authors' genre ids (form_training_prompts); MultiNLI's train split holds the first five
MNLI_GENRES = ("government", "fiction", "travel", "slate", "telephone", "letters", "verbatim", "facetoface",
               "oup", "nineeleven")
MNLI_LABELS = ("entailment", "neutral", "contradiction")
#: shakespeare-pairs: the first plays of the archive stand for genres, each giving these many pairs
PAIR_PLAYS, PAIRS_TRAIN, PAIRS_TEST = 10, 200, 20
HUB_NEEDED = ("the Hugging Face hub cannot be reached ({err}); {what} is downloaded from it once (then cached): "
              "run with internet access first")


def prompt(premise: str, hypothesis: str, label: int) -> str:
    """The authors' training prompt of one pair (their ``form_training_prompts``)."""
    return f"mnli hypothesis: {hypothesis} premise: {premise} target: {MNLI_LABELS[label]}<|endoftext|>"


class CausalLM(nn.Module):
    """A Hugging Face causal language model over right-padded token ids, scored as the authors do.

    ``forward`` cuts a batch to its longest prompt (the authors pad each batch to its longest) and
    returns the logits (N, L, vocab); ``lm_loss`` is the mean cross-entropy of the next token at every
    position but the last, padding included (their loss). ``head`` declares FedALS's cut: the last
    ``HEAD_LAYERS`` decoder layers and the output projection ``lm_head``; the body is everything else,
    the position embeddings, the first layers and the final layer norm (their layer groups: a group
    opens at each ``k_proj.weight``, at the embeddings and at ``lm_head``, and the final layer norm,
    registered before the layers, joins the embeddings' group). OPT ties ``lm_head`` to the token
    embedding, one tensor under two names: the state dict names it once, as the parameter
    (``lm.model.decoder.embed_tokens.weight``), so every strategy averages and sends it once a round,
    and loading a state fills the other name. It is the head's (``head`` names the embedding for the
    tied ``lm_head``): in the authors' code it travels in both groups and the head's copy is loaded
    last, so the shared matrix follows the head's averages in both. An untied OPT keeps ``lm_head``
    in the head and its embedding in the body.
    """

    causal_lm = True

    def __init__(self, lm: nn.Module, pad_id: int) -> None:
        super().__init__()
        self.lm = lm
        self.pad_id = pad_id
        layers = lm.config.num_hidden_layers
        if layers <= HEAD_LAYERS:
            raise ValueError(f"an OPT with {layers} decoder layers has no body before its {HEAD_LAYERS}-layer head")
        tied = lm.lm_head.weight is lm.model.decoder.embed_tokens.weight
        self.head = tuple(f"lm.model.decoder.layers.{i}" for i in range(layers - HEAD_LAYERS, layers)) + (
            "lm.model.decoder.embed_tokens" if tied else "lm.lm_head",)
        self.register_state_dict_post_hook(_drop_aliases)
        self.register_load_state_dict_pre_hook(_fill_aliases)

    def aliases(self) -> dict[str, str]:
        """{second name: first name} of each parameter registered under two names (tied weights)."""
        first: dict[int, str] = {}
        out = {}
        for name, p in self.named_parameters(remove_duplicate=False):
            if id(p) in first:
                out[name] = first[id(p)]
            else:
                first[id(p)] = name
        return out

    def trim(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, attention mask) cut to the batch's longest prompt."""
        mask = ids != self.pad_id
        length = max(1, int(mask.sum(1).max()))
        return ids[:, :length], mask[:, :length].long()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids, mask = self.trim(ids.long())
        return self.lm(input_ids=ids, attention_mask=mask).logits

    def lm_scores(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(mean next-token loss, number of next tokens predicted right, number of next tokens)."""
        logits = self(ids)[:, :-1]
        target = self.trim(ids.long())[0][:, 1:]
        loss = F.cross_entropy(logits.flatten(0, -2), target.flatten())
        return loss, (logits.argmax(-1) == target).sum(), target.numel()

    def lm_loss(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_scores(ids)[0]


def _drop_aliases(model: CausalLM, state: dict, prefix: str, local_metadata) -> None:
    """The state dict names a tied tensor once, as its parameter does."""
    for alias in model.aliases():
        state.pop(prefix + alias, None)


def _fill_aliases(model: CausalLM, state: dict, prefix: str, *args) -> None:
    """A state naming a tied tensor once loads it under its other names too."""
    for alias, name in model.aliases().items():
        if prefix + alias not in state and prefix + name in state:
            state[prefix + alias] = state[prefix + name]


def opt_config(hidden: int, vocab_size: int, seq_len: int, layers: int = 12, rows: int | None = None):
    """An OPT of ``layers`` decoder layers and width ``hidden`` (OPT-125M: 768, 12 heads of 64), without
    dropout: the authors train the model ``from_pretrained`` returns, which is in eval mode. Its embedding
    has ``rows`` rows (default: the data's ``vocab_size``), [PAD] being the data's last id."""
    from transformers import OPTConfig

    return OPTConfig(vocab_size=rows or vocab_size, hidden_size=hidden, num_hidden_layers=layers, ffn_dim=4 * hidden,
                     num_attention_heads=max(1, hidden // 64), max_position_embeddings=max(seq_len, 2048),
                     word_embed_proj_dim=hidden, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                     pad_token_id=vocab_size - 1)


def random_opt(hidden: int, rows: int | None = None):
    """A factory of a randomly initialised 12-layer OPT of width ``hidden`` for ``model = "<module>:<callable>"``,
    its embedding ``rows`` long (default: the data's vocabulary)."""
    def build(input_shape, num_classes, vocab_size=None, seq_len=None):
        from transformers import OPTForCausalLM

        if vocab_size is None:
            raise ValueError("an OPT reads token ids: pick a text dataset (mnli, shakespeare-pairs)")
        if rows is not None and vocab_size > rows:
            raise ValueError(f"this OPT takes token ids below {rows}; the data's vocabulary is {vocab_size}")
        return CausalLM(OPTForCausalLM(opt_config(hidden, vocab_size, seq_len or SEQ_LEN, rows=rows)), vocab_size - 1)
    size = f"{rows:,} embedding rows" if rows else "vocabulary from the data"
    build.__doc__ = f"A random-weight 12-layer OPT of width {hidden} ({size}, [PAD] the data's last id)."
    return build


opt125m_random = random_opt(768)  # OPT-125M's shape with random weights (memory and speed checks)
opt125m_random_rows = random_opt(768, OPT_ROWS)  # and its 50,272-row embedding, for any smaller vocabulary
opt_small = random_opt(32)  # the CPU run's OPT
opt_tiny = random_opt(16)  # the tests' OPT


def opt125m(input_shape, num_classes, vocab_size=None, seq_len=None):
    """OPT-125M from the hub (``facebook/opt-125m``), its [PAD] the data's last id (inside the model's
    50,272 embeddings: OPT's tokenizer has 50,265 tokens, [PAD] makes 50,266)."""
    from transformers import OPTForCausalLM

    try:
        lm = OPTForCausalLM.from_pretrained(OPT_ID)
    except OSError as err:
        raise OSError(HUB_NEEDED.format(err=str(err).splitlines()[0], what=f"the model {OPT_ID}")) from None
    lm.config.dropout = lm.config.attention_dropout = lm.config.activation_dropout = 0.0
    for m in lm.modules():  # dropout modules read the rate at construction
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    if vocab_size is None or vocab_size > lm.config.vocab_size:
        raise ValueError(f"OPT-125M takes token ids below {lm.config.vocab_size}; the data's vocabulary is {vocab_size}")
    return CausalLM(lm, vocab_size - 1)


# --------------------------------------------------------------------------- tokenizers


def with_pad(tokenizer):
    """The authors' ``tokenizer.add_special_tokens({'pad_token': '[PAD]'})``; [PAD] must be the last id."""
    tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    tokenizer.padding_side = "right"
    if tokenizer.pad_token_id != len(tokenizer) - 1:
        raise ValueError(f"[PAD] got id {tokenizer.pad_token_id}, not the last id {len(tokenizer) - 1}")
    return tokenizer


def opt_tokenizer():
    from transformers import AutoTokenizer

    try:
        return with_pad(AutoTokenizer.from_pretrained(OPT_ID))
    except OSError as err:
        raise OSError(HUB_NEEDED.format(err=str(err).splitlines()[0], what=f"the tokenizer of {OPT_ID}")) from None


def word_tokenizer(texts) -> "PreTrainedTokenizerFast":  # noqa: F821
    """A word-level tokenizer of ``texts`` (words and punctuation runs), prepending OPT's ``</s>`` as OPT's
    tokenizer does, plus [PAD]: an offline stand-in for OPT's BPE with the same interface."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    split = pre_tokenizers.Whitespace()
    words = sorted({w for t in texts for w, _ in split.pre_tokenize_str(t)})
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["</s>", "<unk>", *words])}, unk_token="<unk>"))
    tok.pre_tokenizer = split
    tok.post_processor = processors.TemplateProcessing(single="</s> $A", special_tokens=[("</s>", 0)])
    return with_pad(PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", unk_token="<unk>",
                                            model_input_names=["input_ids", "attention_mask"]))


def encode(tokenizer, texts) -> torch.Tensor:
    """(N, SEQ_LEN) int32 ids, cut to SEQ_LEN tokens and right-padded with [PAD] (the model trims each
    batch back to its longest prompt, as the authors' ``padding=True`` pads it)."""
    ids = tokenizer(list(texts), truncation=True, max_length=SEQ_LEN, padding="max_length")["input_ids"]
    return torch.tensor(ids, dtype=torch.int32)


def arrays_of(tokenizer, train: tuple, test: tuple, num_genres: int) -> dict:
    """The dataset's tensors from (prompts, genres) of both splits."""
    return {"train_x": encode(tokenizer, train[0]), "train_y": torch.tensor(train[1], dtype=torch.int64),
            "test_x": encode(tokenizer, test[0]), "test_y": torch.tensor(test[1], dtype=torch.int64),
            "num_classes": num_genres, "vocab_size": len(tokenizer), "mean": [], "std": []}


# --------------------------------------------------------------------------- datasets


def read_mnli() -> dict:
    """MultiNLI from the hub: the authors' prompts of ``train`` (training) and ``validation_matched``
    (the test set), labelled with the genre, tokenized with OPT's tokenizer plus [PAD]."""
    import datasets

    try:
        ds = datasets.load_dataset(MNLI_ID)
    except (OSError, ConnectionError, ValueError) as err:
        raise OSError(HUB_NEEDED.format(err=str(err).splitlines()[0], what=f"the dataset {MNLI_ID}")) from None
    split = {name: ([prompt(p, h, lab) for p, h, lab in zip(ds[name]["premise"], ds[name]["hypothesis"],
                                                             ds[name]["label"])],
                    [MNLI_GENRES.index(g) for g in ds[name]["genre"]])
             for name in ("train", "validation_matched")}
    return arrays_of(opt_tokenizer(), split["train"], split["validation_matched"], len(MNLI_GENRES))


def shakespeare_pairs(plays: list[list[list[str]]]) -> tuple[tuple, tuple]:
    """Sentence pairs of the first ``PAIR_PLAYS`` plays (each a list of its roles' lines), the play
    standing for the genre: a premise is a role's line; its hypothesis, drawn with equal chances, the
    role's next line ("entailment"), a line of another role of the play ("neutral") or a line of another
    play ("contradiction"). ``PAIRS_TRAIN`` training and ``PAIRS_TEST`` test prompts per play, seeded:
    ((prompts, genres), (prompts, genres))."""
    plays = [roles for roles in ([lines for lines in p if len(lines) > 1] for p in plays) if len(roles) > 1]
    plays = plays[:PAIR_PLAYS]
    rng = np.random.default_rng(0)
    out = (([], []), ([], []))
    for genre, roles in enumerate(plays):
        for i in range(PAIRS_TRAIN + PAIRS_TEST):
            r = int(rng.integers(len(roles)))
            j = int(rng.integers(len(roles[r]) - 1))
            label = int(rng.integers(3))
            if label == 0:
                hypothesis = roles[r][j + 1]
            else:
                other = plays[int(rng.choice([g for g in range(len(plays)) if g != genre]))] if label == 2 else \
                    [roles[k] for k in range(len(roles)) if k != r]
                lines = other[int(rng.integers(len(other)))]
                hypothesis = lines[int(rng.integers(len(lines)))]
            texts, genres = out[i >= PAIRS_TRAIN]
            texts.append(prompt(roles[r][j], hypothesis, label))
            genres.append(genre)
    return out


def read_shakespeare_pairs(plays: list[list[list[str]]]) -> dict:
    """``shakespeare-pairs``: the offline stand-in for MultiNLI, tokenized by a word tokenizer of its
    training prompts."""
    train, test = shakespeare_pairs(plays)
    return arrays_of(word_tokenizer(train[0]), train, test, len(set(train[1])))
