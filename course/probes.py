"""What the worker (course/worker.py) does with one request: call the student's function on the judge's inputs and
gather what it returned. Each probe takes (values, tensors) and gives back (values, tensors): numbers, lists and
tensors only. A probe holds no expected value, no check and no answer: the judge (course/judge.py) compares.

Each exercise is graded alone: a probe never calls another exercise's function. Where the student's function needs
one (exercise 4's layer attends, exercise 12's encoder attends), the probe gives it PyTorch's own (the fused
attention kernel), or a small random module of the same interface that is no exercise (exercise 5's decoder).
"""
from __future__ import annotations

import contextlib
import copy
import random
import tempfile
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

Values = dict
Tensors = dict[str, torch.Tensor]


class Calls(TorchFunctionMode):
    """The names of the PyTorch functions called inside `with Calls() as calls:` (a loop over the items shows as
    calls that grow with the batch; the fused attention kernel shows by its name)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def library_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                      dropout_p: float = 0.0) -> torch.Tensor:
    """PyTorch's fused kernel, in place of exercise 1 wherever another exercise's probe needs attention."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


@contextlib.contextmanager
def library_attention_in_place():
    """Exercise 1's function replaced by PyTorch's fused kernel inside the block, put back afterwards."""
    import model

    own, model.attention = model.attention, library_attention
    try:
        yield
    finally:
        model.attention = own


def using_library_attention(probe: Callable[[Values, Tensors], tuple[Values, Tensors]]):
    """The probe, run with exercise 1's function replaced by PyTorch's (another exercise's probe needs attention)."""
    def run(args: Values, t: Tensors) -> tuple[Values, Tensors]:
        with library_attention_in_place():
            return probe(args, t)
    return run


def tiny_config(dropout: float = 0.1):
    from model import BertConfig

    return BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=32, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


# ----------------------------------------------------------------------------------------------------------------


def attention(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import model

    torch.manual_seed(args.get("seed", 0))
    with Calls() as calls:
        y = model.attention(t["q"], t["k"], t["v"], t.get("mask"), args.get("dropout_p", 0.0))
    return {"calls": sorted(set(calls.names))}, {"y": y}


def pool(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import model

    return {}, {mode: model.pool(t["hidden"], t["attention_mask"], mode) for mode in args["modes"]}


def delete_words(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import tsdae

    runs, changed, same = [], False, False
    for _ in range(args.get("runs", 1)):
        rng, outputs = random.Random(args["seed"]), []
        for words in args["sentences"]:
            before = copy.deepcopy(words)
            out = tsdae.delete_words(words, args["ratio"], rng)
            changed, same = changed or words != before, same or out is words
            outputs.append([[int(token) for token in word] for word in out])
        runs.append(outputs)
    return {"runs": runs, "changed_its_input": changed, "returned_its_input": same}, {}


def cutoffs(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import consert

    function = getattr(consert, args["function"])
    torch.manual_seed(args.get("seed", 0))
    return {}, {"y": torch.stack([function(t["x"].clone(), t["attention_mask"], args["rate"])
                                  for _ in range(args["times"])])}


def shuffle(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import consert

    torch.manual_seed(args.get("seed", 0))
    return {}, {"y": torch.stack([consert.shuffled_positions(t["attention_mask"]) for _ in range(args["times"])])}


def span(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import consert

    torch.manual_seed(args.get("seed", 0))
    return {}, {"y": torch.stack([consert.span_mask(t["attention_mask"], args["rate"]) for _ in range(args["times"])])}


def nt_xent(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import consert

    values, out = {"calls": []}, {}
    for i, call in enumerate(args["calls"]):
        z1, z2 = t[call["z1"]].clone().requires_grad_(), t[call["z2"]].clone().requires_grad_()
        same = t[call["same"]] if call.get("same") else None
        with Calls() as calls:
            loss = consert.nt_xent(z1, z2, call["temperature"], same)
        values["calls"].append(len(calls.names))
        out[f"{i}/loss"] = loss.detach().reshape(())
        if call.get("grad") and loss.requires_grad:
            g1, g2 = torch.autograd.grad(loss, (z1, z2), allow_unused=True)
            out[f"{i}/grad_z1"] = torch.zeros_like(z1) if g1 is None else g1
            out[f"{i}/grad_z2"] = torch.zeros_like(z2) if g2 is None else g2
    return values, out


def metrics(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import evaluate

    ap = [float(evaluate.average_precision(labels, scores)) for labels, scores in args.get("ap", [])]
    queries = [{k: float(v) for k, v in evaluate.query_metrics(relevant).items()}
               for relevant in args.get("queries", [])]
    return {"ap": ap, "queries": queries}, {}


def read_safetensors(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    from lib import weights

    values, out = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args["files"]):
            path = Path(folder) / f"file{i}.safetensors"
            path.write_bytes(t[f"file{i}"].numpy().tobytes())
            try:
                tensors = weights.read_safetensors(path)
            except NotImplementedError:
                raise
            except Exception as e:  # noqa: BLE001 - a refusal is an outcome here: the judge wants its kind
                values.append({"raised": type(e).__name__})
                continue
            values.append({"names": sorted(tensors)})
            out.update({f"{i}/{name}": tensor.clone() for name, tensor in tensors.items()})
    return {"files": values}, out


def decoder_layer(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import tsdae
    from model import EncoderLayer

    cfg = tiny_config()
    torch.manual_seed(args["seed"])
    layer = tsdae.DecoderLayer(EncoderLayer(cfg), cfg)
    x, memory, causal = t["x"].clone().requires_grad_(), t["memory"].clone().requires_grad_(), t["causal"]
    out: Tensors = {}
    with torch.no_grad():
        out["eval"] = layer.eval()(t["x"], t["memory"], causal)
        if "x_changed" in t:
            out["eval_x_changed"] = layer(t["x_changed"], t["memory"], causal)
            out["eval_memory_changed"] = layer(t["x"], t["memory_changed"], causal)
    layer.train()
    torch.manual_seed(args["seed"] + 1)
    y = layer(x, memory, causal)
    out["train"] = y.detach()
    names = [name for name, _ in layer.named_parameters()]
    grads = torch.autograd.grad(y, [x, memory, *layer.parameters()], t["grad"], allow_unused=True)
    for name, g, like in zip(["x", "memory", *names], grads, [x, memory, *layer.parameters()]):
        out[f"grad/{name}"] = torch.zeros_like(like) if g is None else g
    return {}, out


class ToyEncoder(nn.Module):
    """A sentence encoder of the objective's interface, (ids, mask) -> (B, d): an embedding, averaged over the real
    tokens, through a Linear. No exercise: a stand-in that exercise 5's probe can train through."""

    def __init__(self, vocab: int, d: int):
        super().__init__()
        self.embedding, self.linear = nn.Embedding(vocab, d), nn.Linear(d, d)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        weights = attention_mask.float() / attention_mask.float().sum(1, keepdim=True)  # (B, L)
        return torch.tanh(self.linear((self.embedding(input_ids) * weights[:, :, None]).sum(1)))  # (B, d)


class ToyDecoder(nn.Module):
    """A decoder of TSDAEDecoder's interface (forward(input_ids, memory, keep), logits, neg_log_likelihood): each
    position's state is a function of its token, the tokens before it (a cumulative mean) and the memory. No
    exercise: a random module exercise 5's probe can train through."""

    def __init__(self, vocab: int, d: int):
        super().__init__()
        self.embedding, self.mix, self.head = nn.Embedding(vocab, d), nn.Linear(2 * d, d), nn.Linear(d, vocab)

    def forward(self, input_ids: torch.Tensor, memory: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        e = self.embedding(input_ids)  # (B, L, d)
        before = e.cumsum(1) / torch.arange(1, e.shape[1] + 1, device=e.device)[None, :, None]  # (B, L, d)
        x = torch.tanh(self.mix(torch.cat([before, memory.expand_as(e)], dim=-1)))  # (B, L, d)
        return x if keep is None else x[keep]

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.head(states)

    def neg_log_likelihood(self, states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.logits(states), labels, reduction="sum")


def tsdae_loss(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    import tsdae

    torch.manual_seed(args["seed"])
    objective = tsdae.TSDAELoss.__new__(tsdae.TSDAELoss)
    nn.Module.__init__(objective)
    objective.encoder, objective.decoder = ToyEncoder(args["vocab"], 8), ToyDecoder(args["vocab"], 8)
    objective.normalisation, objective.global_mean = args["normalisation"], tsdae.batch_mean
    batch = {name: t[name] for name in ("damaged_ids", "damaged_mask", "original_ids", "original_mask")}
    loss = objective(batch)
    out = {"loss": loss.detach().reshape(())}
    if loss.requires_grad:
        params = dict(objective.named_parameters())
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        out.update({f"grad/{n}": torch.zeros_like(p) if g is None else g for (n, p), g in zip(params.items(), grads)})
    return {}, out


def backward_in_chunks(args: Values, t: Tensors) -> tuple[Values, Tensors]:
    from model import Bert
    from speedups import gradcache

    cfg = tiny_config(dropout=0.2)
    torch.manual_seed(args["seed"])
    bert, head = Bert(cfg).train(), nn.Linear(16, 16)

    def encode(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return head(bert(ids, mask)[:, 0])  # (N, d): the first token's state

    chunks = gradcache.in_chunks(t["input_ids"], t["attention_mask"], args["chunk"])
    states = []
    with torch.no_grad():  # step 1: the vectors without a graph, each chunk's random state kept
        for chunk in chunks:
            states.append(gradcache.random_state(torch.device("cpu")))
            encode(*chunk)
    torch.rand(3)  # the run goes on drawing after the encoder passes (the loss, the next batch)
    before = torch.get_rng_state()
    gradcache.backward_in_chunks(encode, chunks, states, t["grad"])
    after = torch.get_rng_state()
    params = dict(bert.named_parameters()) | {f"head.{n}": p for n, p in head.named_parameters()}
    out = {f"grad/{n}": torch.zeros_like(p) if p.grad is None else p.grad for n, p in params.items()}
    return {"random_state_kept": bool(torch.equal(before, after))}, out


PROBES: dict[str, Callable[[Values, Tensors], tuple[Values, Tensors]]] = {
    "attention": attention, "pool": pool, "delete_words": delete_words, "cutoffs": cutoffs, "shuffle": shuffle,
    "span": span, "nt_xent": nt_xent, "metrics": metrics, "read_safetensors": read_safetensors,
    "decoder_layer": using_library_attention(decoder_layer), "tsdae_loss": tsdae_loss,
    "backward_in_chunks": using_library_attention(backward_in_chunks),
}
