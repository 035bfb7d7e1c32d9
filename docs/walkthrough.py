# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The walkthrough: TSDAE and ConSERT, one piece at a time
#
# Each section shows one idea of the papers run on one sentence or one small batch, with the project's own
# functions (nothing here restates them), then names the exercise of [ASSIGNMENTS.md](../ASSIGNMENTS.md) that has
# you write that function. The order is the papers':
#
# 1. the encoder: one vector per sentence (checked against `transformers`)
# 2. TSDAE's noise (arXiv:2104.06979 §3.1, app. A)
# 3. TSDAE's bottleneck: the decoder sees one vector (§3.2)
# 4. TSDAE's loss, token by token (§3.1)
# 5. a few hundred TSDAE steps, and what the vector remembers
# 6. ConSERT's views and NT-Xent (arXiv:2105.11741 §3.2-3.3)
# 7. the collapse of raw BERT vectors, and what each method does to it (ConSERT §1)
# 8. then your labels: fine-tuning (TSDAE §6)
#
# `docs/walkthrough.py` is the source (jupytext's percent format: review and edit that file);
# `docs/walkthrough.ipynb` is the same cells with their outputs. Rebuild the notebook after an edit with
# `make walkthrough-build`; `tests/test_walkthrough.py` runs this source from a fresh kernel (with fewer training
# steps) and checks that the committed notebook's cells are this file's. Open it with `make walkthrough`.
#
# To run it: `make install-dev` in the repository (or, on a hosted notebook service, clone the repository and run
# the Makefile's `pip install` lines; with ../shared/ absent the model is the shipped all-MiniLM-L6-v2), open this
# notebook from `docs/`, and run every cell: a minute or two on 2 CPU cores (its last cell prints the time).
#
# The model is the raw masked-LM "bert-mini" stand-in (4 layers, width 256: [standin.md](standin.md)) when it is
# there (`$MINI`, else `../shared/models/bert-mini-mlm`), else the shipped all-MiniLM-L6-v2. Section 7 reads the
# STS benchmark (`python evaluate.py --fetch-data data`, or `$EVAL_DATA_DIR`).

# %%
import json
import os
import random
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm in a notebook without ipywidgets

started = time.perf_counter()
ROOT = Path.cwd().parent if Path.cwd().name == "docs" else Path.cwd()  # the repository: the commands' paths
os.chdir(ROOT)
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import consert  # noqa: E402
import consert_train  # noqa: E402
import data  # noqa: E402
import evaluate  # noqa: E402
import finetune_train  # noqa: E402
import model  # noqa: E402
import plot_similarities  # noqa: E402  (examples/: the README's cosine histograms)
import tsdae  # noqa: E402
import tsdae_train  # noqa: E402
from lib.datafiles import STSB_SPLITS, load_stsb  # noqa: E402
from lib.taskfiles import default_data_dir  # noqa: E402
from lib.weights import default_model_path  # noqa: E402

plt.rcParams.update({"figure.dpi": 60, "font.size": 9})  # small figures keep the notebook file small
torch.manual_seed(0)
# tests/test_walkthrough.py sets WALKTHROUGH_QUICK=1: the same cells with a few training steps (the asserts
# check identities, which hold after any number of steps)
QUICK = os.environ.get("WALKTHROUGH_QUICK") == "1"
MINI = Path(os.environ.get("MINI") or ROOT.parent / "shared" / "models" / "bert-mini-mlm")
MODEL = str(MINI) if (MINI / "config.json").exists() else default_model_path()
RUNS = Path("runs/walkthrough")  # what the training cells write (git ignores runs/)
print("model:", MODEL if MODEL != str(MINI) else "the raw bert-mini stand-in", "| quick:", QUICK)

# %% [markdown]
# ## 1. The encoder: one sentence, one vector
#
# `model.SentenceEncoder` is a tokenizer, `model.Bert` and a pooling. The tokenizer splits a sentence into
# WordPiece tokens between `[CLS]` and `[SEP]`; BERT turns each token into a state vector of width d; pooling turns
# the (L, d) states into one vector. TSDAE pools with the `[CLS]` state (its app. A), ConSERT with the mean.

# %%
encoder = model.SentenceEncoder.from_pretrained(MODEL, pooling="cls").eval()
sentence = "The cat sat on the mat near the open window."
encoding = encoder.tokenizer.encode(sentence)
print(encoding.tokens)
input_ids = torch.tensor([encoding.ids])  # (1, L)
attention_mask = torch.ones_like(input_ids)  # (1, L): 1 = a real token
with torch.no_grad():
    states = encoder.bert(input_ids, attention_mask)  # (1, L, d)
    vector = encoder(input_ids, attention_mask)  # (1, d): model.pool(states, attention_mask, "cls")
print("token states", tuple(states.shape), "-> sentence vector", tuple(vector.shape))

# %% [markdown]
# The same sentence through `transformers` (a test-only oracle, never imported by the project's code): the
# vectors agree to float32 rounding.

# %%
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()  # it would list the checkpoint's MLM head, which BertModel leaves out
reference = transformers.AutoModel.from_pretrained(MODEL).eval()
with torch.no_grad():
    theirs = reference(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (1, L, d)
print(f"largest difference of the token states: {(states - theirs).abs().max():.2e}")
assert torch.allclose(states, theirs, atol=1e-5), "model.Bert no longer gives transformers' token states"
assert torch.allclose(vector, theirs[:, 0], atol=1e-5)

fig, ax = plt.subplots(figsize=(9, 2.6))
ax.imshow(states[0].T[:64], aspect="auto", cmap="RdBu_r", vmin=-2, vmax=2)
ax.set_xticks(range(len(encoding.tokens)), encoding.tokens, rotation=45)
ax.set_ylabel("feature (first 64 of d)")
ax.set_title("token states (one column per token); TSDAE's sentence vector is the [CLS] column")
plt.show()

# %% [markdown]
# **Exercises 1 and 2** ([ASSIGNMENTS.md](../ASSIGNMENTS.md)): write `model.attention`, the scaled dot-product
# attention inside every layer above, and `model.pool`, the step from states to one vector
# (`python course/assignments.py grade 1 2`).
#
# ## 2. TSDAE's noise: what deletion leaves of a sentence
#
# TSDAE damages each training sentence before encoding it: its best noise deletes each word with probability 0.6
# (§3.1, app. A tab. 5-6). `tsdae.words_of` splits a sentence into the tokenizer's words (each a list of token
# ids); `tsdae.delete_words` keeps each with probability 1 - ratio, and never leaves a sentence empty.

# %%
head, words, tail = tsdae.words_of(encoder.tokenizer, sentence)
word_text = [encoder.tokenizer.decode(w) for w in words]
ratios = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
kept_grid = []
for ratio in ratios:
    kept = tsdae.delete_words(words, ratio, random.Random(f"walkthrough-{ratio}"))
    kept_grid.append([any(w is k for k in kept) for w in words])  # which of the word lists survived
    print(f"ratio {ratio:.1f}: {encoder.tokenizer.decode([t for w in kept for t in w])}")

fig, ax = plt.subplots(figsize=(7, 3))
ax.imshow(torch.tensor(kept_grid, dtype=torch.float), cmap="Greens", vmin=-0.3, vmax=1, aspect="auto")
ax.set_xticks(range(len(words)), word_text, rotation=45)
ax.set_yticks(range(len(ratios)), [f"{r:.1f}" for r in ratios])
ax.set_ylabel("deletion ratio")
ax.set_title("the words delete_words keeps (green), one draw per ratio")
plt.show()

# %% [markdown]
# Over many draws the deleted share is the ratio: exercise 3's grading checks 0.60 ± 0.02.

# %%
rng = random.Random(0)
lengths = [len(tsdae.delete_words(words, 0.6, rng)) for _ in range(2000)]
deleted_share = 1 - sum(lengths) / (len(words) * len(lengths))
print(f"deleted share at ratio 0.6 over 2000 draws: {deleted_share:.3f}")
assert abs(deleted_share - 0.6) < 0.03

# %% [markdown]
# The paper's other noises (app. A tab. 5), all in `tsdae.NOISE`: swap shuffles the picked words, mask replaces
# them with `[MASK]`, replace with a random token, add inserts random tokens. Deletion won.

# %%
vocab = tsdae.ordinary_token_ids(encoder.tokenizer)
mask_id = data.special_token_id(encoder.tokenizer, "mask")
for name, noise in tsdae.NOISE.items():
    damaged = noise(words, 0.3, random.Random(1), mask_id=mask_id, vocab=vocab)
    print(f"{name:>7} 0.3: {encoder.tokenizer.decode([t for w in damaged for t in w], skip_special_tokens=False)}")

# %% [markdown]
# **Exercise 3**: write `tsdae.delete_words` (`python course/assignments.py grade 3`).
#
# ## 3. The bottleneck: the decoder sees one vector
#
# `tsdae.TSDAELoss` puts a decoder on the encoder, tied to it (the same embeddings, self-attention and
# feed-forward weights, app. A), plus a cross-attention in each layer. The decoder reads the original sentence
# with **causal** self-attention (position t sees positions ≤ t) and **cross-attention to the sentence vector
# alone**: a memory of length 1 (§3.2). We watch one forward pass, with forward hooks on the attention modules
# (PyTorch's API for reading a module's inputs), and draw the attention weights: `model.attention` with the
# identity matrix as its values returns the weights themselves.

# %%
torch.manual_seed(0)
objective = tsdae.TSDAELoss(model.SentenceEncoder.from_pretrained(MODEL, pooling="cls")).eval()
pairs = tsdae.DenoisingDataset([sentence], encoder.tokenizer, encoder.max_length)  # deletion, ratio 0.6
batch = tsdae.collate_pairs([pairs[(0, 0)]])  # damaged_ids, damaged_mask, original_ids, original_mask (1, L)
print("damaged:", encoder.tokenizer.decode(batch["damaged_ids"][0].tolist()))

layer = objective.decoder.layers[0]
seen = {}
hooks = [layer.self_attn.register_forward_hook(lambda m, args, kw, out: seen.update(self=(args, kw)), with_kwargs=True),
         layer.cross_attn.register_forward_hook(lambda m, args, kw, out: seen.update(cross=(args, kw)), with_kwargs=True)]
with torch.no_grad():
    memory = objective.memory(batch)  # (1, 1, d): the damaged sentence's vector
    decoder_input = batch["original_ids"][:, :-1]  # (1, L-1): the original, teacher-forced
    objective.decoder(decoder_input, memory)
for hook in hooks:
    hook.remove()


def attention_weights(attn: model.MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor | None,
                      kv: torch.Tensor) -> torch.Tensor:
    """The weights (h, Lq, Lk) of attention module `attn`: model.attention with V = the identity (Lk, Lk)."""
    q, k = model.split_heads(attn.q(x), attn.n_heads), model.split_heads(attn.k(kv), attn.n_heads)  # (1, h, L, dh)
    identity = torch.eye(k.shape[2]).expand(1, attn.n_heads, -1, -1)  # (1, h, Lk, Lk)
    return model.attention(q, k, identity, mask)[0]  # (h, Lq, Lk)


with torch.no_grad():
    (x_self, causal), _ = seen["self"]  # self_attn(x, causal)
    (x_cross,), kw = seen["cross"]  # cross_attn(x, memory=memory)
    self_weights = attention_weights(layer.self_attn, x_self, causal, x_self)  # (h, L-1, L-1)
    cross_weights = attention_weights(layer.cross_attn, x_cross, None, kw["memory"])  # (h, L-1, 1)
print("causal mask", tuple(causal.shape), "| cross-attention keys:", kw["memory"].shape[1])
assert torch.equal(causal, torch.ones_like(causal).tril())
assert torch.allclose(cross_weights, torch.ones_like(cross_weights))  # one key: softmax over one score is 1

tokens = [encoder.tokenizer.id_to_token(int(i)) for i in decoder_input[0]]
fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), gridspec_kw={"width_ratios": [5, 5, 1]})
axes[0].imshow(causal, cmap="Greys", vmin=-0.2, vmax=1.2)
axes[0].set_title("causal mask: query t may see key t' <= t")
axes[1].imshow(self_weights[0], cmap="viridis")
axes[1].set_title("self-attention weights, layer 1, head 1")
axes[2].imshow(cross_weights[0], cmap="viridis", vmin=0, vmax=1, aspect="auto")
axes[2].set_title("cross-attention:\none key, s")
axes[2].set_xticks([0], ["s"])
for ax in axes:
    ax.set_yticks(range(len(tokens)), tokens)
for ax in axes[:2]:
    ax.set_xticks(range(len(tokens)), tokens, rotation=90)
fig.tight_layout()
plt.show()

# %% [markdown]
# With one key the softmax is 1 for every query: each position of the decoder receives the same
# `s W_v W_o`, whatever its query (exercise 4's question; `speedups/fast.py: SentenceVectorAttention` computes it
# so). So nothing but the vector reaches the decoder. The proof, run: change every encoder token state except
# `[CLS]` (a hook on the encoder's last layer) and the decoder's output does not move; change `[CLS]` and it does.

# %%
def decoder_states(change: slice | None) -> torch.Tensor:
    """The decoder's states for the batch, the encoder's last-layer states at positions `change` replaced by noise."""
    last = objective.encoder.bert.layers[-1]

    def noise(module: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()  # (1, L, d)
        if change is not None:
            out[:, change] = torch.randn_like(out[:, change])
        return out

    hook = last.register_forward_hook(noise)
    try:
        with torch.no_grad():
            return objective.decoder(decoder_input, objective.memory(batch))  # (1, L-1, d)
    finally:
        hook.remove()


unchanged = decoder_states(None)
others_changed = decoder_states(slice(1, None))  # every token state but [CLS]
cls_changed = decoder_states(slice(0, 1))
print(f"others changed: largest difference {(others_changed - unchanged).abs().max():.1e}; "
      f"[CLS] changed: {(cls_changed - unchanged).abs().max():.2f}")
assert torch.equal(others_changed, unchanged), "the decoder read more than the sentence vector"
assert not torch.allclose(cls_changed, unchanged)

# %% [markdown]
# **Exercise 4**: write `tsdae.DecoderLayer.forward`, the three blocks drawn above
# (`python course/assignments.py grade 4`; its second test is this proof).
#
# ## 4. The loss, token by token
#
# Teacher forcing (§3.1): the decoder reads `[CLS] w1 ... wn` and predicts `w1 ... wn [SEP]`, each token from
# the ones before it and the vector. The loss is the mean over the tokens of -log P(token). Below each token's
# term, from the decoder's own `logits`; their mean is `TSDAELoss` of the batch.

# %%
with torch.no_grad():
    labels = batch["original_ids"][0, 1:]  # (L-1,): the next token at every position
    logits = objective.decoder.logits(unchanged[0])  # (L-1, V)
    per_token = F.cross_entropy(logits, labels, reduction="none")  # (L-1,): -log P(x_t | x_<t, s)
    loss = objective(batch)  # TSDAELoss.forward: the mean over the label tokens
print(f"mean of the bars {per_token.mean():.4f} = TSDAELoss {loss:.4f}")
assert torch.allclose(per_token.mean(), loss, atol=1e-5), "the per-token terms no longer average to TSDAELoss"

label_tokens = [encoder.tokenizer.id_to_token(int(i)) for i in labels]
fig, ax = plt.subplots(figsize=(8, 2.6))
ax.bar(range(len(labels)), per_token, color="tab:purple")
ax.axhline(float(loss), color="black", linestyle="--", label=f"TSDAELoss = mean = {loss:.2f}")
ax.set_xticks(range(len(labels)), label_tokens, rotation=45)
ax.set_ylabel("-log P(token)")
ax.set_title("before training: each token's negative log-likelihood given the vector of the damaged sentence")
ax.legend()
plt.show()

# %% [markdown]
# **Exercise 5**: write `tsdae.TSDAELoss.forward` (`python course/assignments.py grade 5`).
#
# ## 5. A few hundred steps of TSDAE
#
# `tsdae_train.main` is `python tsdae.py`: the same command-line flags. 300 steps of 8 sentences of
# `examples/topics.txt` (248 sentences on 5 topics, about 10 epochs) at lr 1e-4, as the README trains the stand-in.

# %%
tsdae_steps = 20 if QUICK else 300
tsdae_run = RUNS / "tsdae"
tsdae_train.main(["--corpus", "examples/topics.txt", "--model", MODEL, "--steps", str(tsdae_steps), "--lr", "1e-4",
                  "--save-every", "0", "--overwrite", "--out", str(tsdae_run)])
log = [json.loads(line) for line in (tsdae_run / "log.jsonl").read_text().splitlines()]
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.plot([r["step"] for r in log], [r["loss"] for r in log], lw=0.8)
ax.set_xlabel("step")
ax.set_ylabel("TSDAELoss")
ax.set_title("TSDAE on examples/topics.txt (log.jsonl)")
plt.show()

# %% [markdown]
# What does the vector remember? Damage a few sentences as training does, and let the decoder rebuild each from
# its vector alone (greedy decoding, `tsdae.reconstruct`), before training and after (the README's
# `examples/reconstruct.py` does the same from the command line). Before training the decoder knows no sentence;
# after 300 steps from the raw stand-in it has learned the corpus's commonest words more than any one sentence
# (the README's run from all-MiniLM-L6-v2 gets back each sentence's topic).

# %%
trained, settings = tsdae.load_decoder(tsdae_run)
torch.manual_seed(settings["seed"])  # the untrained start: as tsdae.py built it at step 0
untrained = tsdae.TSDAELoss(model.SentenceEncoder.from_pretrained(MODEL, pooling="cls")).eval()
corpus = Path("examples/topics.txt").read_text().splitlines()
chosen = [corpus[i] for i in (3, 60, 130, 200)]
damage = tsdae.DenoisingDataset(chosen, encoder.tokenizer, encoder.max_length, seed=1)
decode = lambda ids: encoder.tokenizer.decode(ids)
for i, original in enumerate(chosen):
    damaged, _ = damage[(0, i)]
    print(f"original  {original}\ndamaged   {decode(damaged)}")
    print(f"before    {decode(tsdae.reconstruct(untrained, damaged, max_length=24))}")
    print(f"after     {decode(tsdae.reconstruct(trained, damaged, max_length=24))}\n")

# %% [markdown]
# ## 6. ConSERT: two views of a sentence, and NT-Xent
#
# ConSERT makes its views **at the embedding layer** (§3.3): the words stay, the position ids or the (L, d)
# embedding output change, between `Bert.embed` and `Bert.run_layers` (`ConSERTLoss.encode`). Each image below is
# the embedding matrix of one sentence (one row per token) under one view, made by `consert.augment` (and
# `consert.shuffled_positions` for the shuffle, which permutes the position ids).

# %%
torch.manual_seed(3)
with torch.no_grad():
    clean = encoder.bert.embed(input_ids)  # (1, L, d)
    views = {"none": clean,
             "shuffle": encoder.bert.embed(input_ids, consert.shuffled_positions(attention_mask))}
    for view in (consert.View("token_cutoff", 0.2), consert.View("feature_cutoff", 0.2),
                 consert.View("span", 0.5), consert.View("dropout", 0.2)):
        x, mask = consert.augment(clean, attention_mask, view)  # the view's embeddings and attention mask
        views[f"{view.name} {view.rate:g}"] = x * mask[:, :, None]  # a span's masked tokens drawn as zeros
assert (views["token_cutoff 0.2"][0].abs().sum(1) == 0).sum() == int(len(encoding.ids) * 0.2)
assert (views["feature_cutoff 0.2"][0].abs().sum(0) == 0).sum() == int(encoder.bert.cfg.hidden_size * 0.2)

fig, axes = plt.subplots(1, 6, figsize=(12, 3), sharey=True)
for ax, (name, x) in zip(axes, views.items()):
    ax.imshow(x[0, :, :48], cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax.set_title(name)
    ax.set_xlabel("feature (first 48)")
axes[0].set_yticks(range(len(encoding.tokens)), encoding.tokens)
fig.suptitle("the embedding output under each view (white: zeroed)")
fig.tight_layout()
plt.show()

# %% [markdown]
# NT-Xent (§3.2, `consert.nt_xent`): the 2N vectors of a batch's two views, on the unit sphere; each one's other
# view is its positive among the 2N-1 others. Its matrix of cosines over the temperature is what the loss reads;
# the loss read off the matrix below is `nt_xent`'s. The unsupervised official views: feature cutoff 0.2 and
# shuffle, the encoder's dropout off.

# %%
batch_sentences = corpus[::31][:8]  # 8 sentences spread over the five topics
TEMPERATURE = 0.05


def similarity_matrix(encoder: model.SentenceEncoder) -> tuple[torch.Tensor, torch.Tensor]:
    """(2N, 2N) cosines / temperature of a batch's two views under ConSERT's official unsupervised views, and nt_xent."""
    objective = consert.ConSERTLoss(encoder, (consert.View("feature_cutoff", 0.2), consert.View("shuffle")),
                                    temperature=TEMPERATURE)
    consert.switch_off_dropout(encoder)
    ids = consert.collate_sentences([encoder.tokenizer.encode(s).ids for s in batch_sentences])
    torch.manual_seed(0)
    with torch.no_grad():
        z1 = objective.encode(ids["input_ids"], ids["attention_mask"], objective.views[0])  # (N, d)
        z2 = objective.encode(ids["input_ids"], ids["attention_mask"], objective.views[1])  # (N, d)
    u = F.normalize(torch.cat([z1, z2]), dim=-1)  # (2N, d)
    return u @ u.T / TEMPERATURE, consert.nt_xent(z1, z2, TEMPERATURE)


def loss_from_matrix(sim: torch.Tensor) -> torch.Tensor:
    """NT-Xent read off the matrix: each row's positive is its other view; the diagonal is no candidate."""
    n = len(sim) // 2
    logits = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    per_row = F.cross_entropy(logits, torch.arange(2 * n).roll(n), reduction="none")
    return per_row[:n].mean() + per_row[n:].mean()


raw = model.SentenceEncoder.from_pretrained(MODEL, pooling="mean").eval()
sim_before, loss_before = similarity_matrix(raw)
assert torch.allclose(loss_from_matrix(sim_before), loss_before, atol=1e-4)

# %% [markdown]
# A few steps of ConSERT (`consert_train.main` is `python consert.py`), batches of 32 on `examples/topics.txt`,
# the author's later advice (temperature 0.05, PyTorch's AdamW) at a higher learning rate for so few steps; then
# the same batch's matrix again.

# %%
consert_steps = 5 if QUICK else 60
consert_run = RUNS / "consert"
consert_train.main(["--corpus", "examples/topics.txt", "--model", MODEL, "--steps", str(consert_steps),
                    "--batch-size", "32", "--lr", "1e-4", "--temperature", str(TEMPERATURE), "--optimizer", "pytorch",
                    "--save-every", "0", "--overwrite", "--out", str(consert_run)])
after = model.SentenceEncoder.from_pretrained(consert_run / "model").eval()
sim_after, loss_after = similarity_matrix(after)
assert torch.allclose(loss_from_matrix(sim_after), loss_after, atol=1e-4)

fig, axes = plt.subplots(1, 2, figsize=(9, 4))
n = len(batch_sentences)
for ax, sim, loss, when in ((axes[0], sim_before, loss_before, "raw"), (axes[1], sim_after, loss_after, "after")):
    image = ax.imshow(sim * TEMPERATURE, cmap="magma", vmin=-0.2, vmax=1)
    ax.set_title(f"{when}: cosines, NT-Xent {loss:.2f}")
    ax.set_xticks([n // 2, n + n // 2], ["view 1", "view 2"])
    ax.set_yticks([n // 2, n + n // 2], ["view 1", "view 2"])
fig.colorbar(image, ax=axes, shrink=0.8)
fig.suptitle(f"{n} sentences, two views each: the positives are the two off-diagonals")
plt.show()
print(f"NT-Xent of this batch: {loss_before:.3f} raw, {loss_after:.3f} after {consert_steps} steps")

# %% [markdown]
# **Exercises 6, 7, 8 and 10**: write `consert.token_cutoff` and `feature_cutoff`, `shuffled_positions`,
# `nt_xent`, and `span_mask` (`python course/assignments.py grade 6 7 8 10`).
#
# ## 7. The collapse
#
# Raw BERT vectors crowd into a narrow cone (ConSERT §1): two unrelated sentences have a high cosine, so cosine
# says little. Below: the cosines of random pairs and of paraphrases (STS benchmark pairs of gold score above 4),
# with alignment (paraphrases close: lower is better) and uniformity (the rest spread: lower is better; Wang &
# Isola 2020), for the raw model and after each method's short run above, by `examples/plot_similarities.py`'s
# `similarities`. A seeded sample of 1500 pairs of the STS benchmark keeps it quick.

# %%
data_dir = default_data_dir()
if not (data_dir / "stsbenchmark").exists():
    raise SystemExit(f"section 7 reads the STS benchmark, not in {data_dir}: python evaluate.py --fetch-data data")
sts = [p for split in STSB_SPLITS for p in load_stsb(data_dir / "stsbenchmark" / f"sts-{split}.csv")]
sts = random.Random(0).sample(sts, 1500)
models = {"raw (mean)": raw, "TSDAE (CLS)": trained.encoder, "ConSERT (mean)": after}
shapes = {name: plot_similarities.similarities(enc, sts, n_random=1500, seed=0) for name, enc in models.items()}
print(plot_similarities.summary(shapes))

fig, axes = plt.subplots(1, 3, figsize=(12, 2.8), sharey=True)
for ax, (name, r) in zip(axes, shapes.items()):
    for kind, color, label in (("random", "tab:gray", "random pairs"), ("paraphrase", "tab:orange", "paraphrases")):
        plot_similarities.bars(ax, r["histogram"][kind], alpha=0.6, color=color, label=label)
    ax.set_title(name)
    ax.set_xlabel("cosine")
axes[0].legend(loc="upper left")
fig.tight_layout()
plt.show()

fig, ax = plt.subplots(figsize=(4, 3))
for name, r in shapes.items():
    ax.scatter(r["uniformity"], r["alignment"], s=40)
    ax.annotate(name, (r["uniformity"], r["alignment"]), fontsize=8)
ax.set_xlabel("uniformity (lower: spread out)")
ax.set_ylabel("alignment (lower: paraphrases close)")
ax.set_title("the shape of the space")
plt.show()

# %% [markdown]
# ConSERT's 60 steps on 248 sentences already push the random pairs apart; TSDAE's short run from the raw model
# does not (the README's figure shows longer runs on the STS sentences, where it does, less than ConSERT). **Exercise 9** writes the ranking metrics that score a space
# (`evaluate.query_metrics`, `average_precision`: `python course/assignments.py grade 9`).
#
# ## 8. Then your labels
#
# TSDAE §6: TSDAE on the unlabelled text first, then supervised training on the labels you have.
# `finetune_train.main` is `python finetune.py`: 175 (anchor, positive) pairs of `examples/topics_pairs.tsv` with
# in-batch negatives, from the TSDAE run of section 5. Scored on the 200 pairs of `examples/topics_test.tsv` (1: same
# topic): Spearman and average precision of the cosine. Those pairs are not among the training pairs, but their
# sentences are in `topics.txt`, the unlabelled text TSDAE read in section 5.

# %%
ft_run = RUNS / "finetune"
finetune_train.main(["--pairs", "examples/topics_pairs.tsv", "--model", str(tsdae_run / "model"),
                     "--epochs", "1" if QUICK else "3", "--save-every", "0", "--overwrite", "--out", str(ft_run)])
tasks = "sts:examples/topics_test.tsv,pairs:examples/topics_test.tsv"
scores = {name: evaluate.evaluate(enc, tasks) for name, enc in
          {"raw": raw, "TSDAE": trained.encoder,
           "TSDAE + fine-tuned": model.SentenceEncoder.from_pretrained(ft_run / "model")}.items()}
for name, s in scores.items():
    print(f"{name:<20} Spearman {s['sts:examples/topics_test.tsv']:6.2f}   AP {s['pairs:examples/topics_test.tsv']:6.2f}")

fig, ax = plt.subplots(figsize=(5, 2.6))
names = list(scores)
ax.barh(names, [scores[k]["pairs:examples/topics_test.tsv"] for k in names], color="tab:green")
ax.set_xlabel("average precision x 100, topics_test.tsv")
ax.invert_yaxis()
plt.show()

# %% [markdown]
# **Exercise 12** takes contrastive batches past memory (`speedups/gradcache.py`), and **exercise 11** reads the
# weights' file by hand (`lib/weights.py`). [LABS.md](../LABS.md) breaks one design choice at a time and measures
# what breaks.

# %%
print(f"the whole notebook: {time.perf_counter() - started:.0f} s")
