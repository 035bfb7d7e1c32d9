"""Big contrastive batches in small memory: the cached gradient (Gao et al. 2021, arXiv:2101.06983, §3).

NT-Xent (consert.nt_xent) compares every sentence of a batch with every other: the loss of a batch is not a sum
over its parts. Plain gradient accumulation, a backward pass per micro-batch, would give each micro-batch only
its own sentences as negatives: another loss. The cached gradient computes the whole batch's loss and its exact
gradient, with the encoder's graph held for one chunk of N sentences at a time:

  1. every encoder pass of the batch, chunk by chunk, without a graph: the vectors z (B, d); before each chunk,
     the random state is remembered (dropout, the shuffle, the cutoffs draw from it);
  2. the loss of the whole batch on those vectors (with its own small graph) and, in the loop's backward,
     g = d loss / d z (B, d): the cached gradient;
  3. each chunk encoded again, with its graph, from the random state it started from in step 1, and
     back-propagated with its rows of g: d loss / d theta = sum over chunks of g_chunk . d z_chunk / d theta.
Step 3 needs the same draws as step 1: replayed from another random state, the vectors would be other vectors,
and the gradient that of a loss nobody computed (the bug of sentence-transformers' cached losses, PR #3862).

CachedVectors is an autograd Function whose backward runs step 3, as torch.utils.checkpoint recomputes a
segment, so the training loop's loss.backward() is unchanged. ChunkedConSERTLoss and ChunkedSupervisedConSERTLoss
(commands/consert_train.py builds them for --micro-batch) are consert.ConSERTLoss and consert.SupervisedConSERTLoss, the
same forward, whose encoder passes (CachedPasses) go through it. The adversarial view is refused: its perturbation is a
gradient through the whole batch's loss inside the forward pass. ChunkedSupervisedLoss does the same for
finetune.SupervisedLoss: in-batch negatives and CoSENT also compare every row of a batch with every other.
"""
from __future__ import annotations

from typing import Callable

import torch

from consert import ConSERTLoss, SupervisedConSERTLoss, UnaugmentedPass, View
from finetune import SupervisedLoss
from model import SentenceEncoder


def random_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The generator state the next random draw on `device` starts from (CPU; and CUDA when there)."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_random_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


class CachedVectors(torch.autograd.Function):
    """encode(*chunk) for each chunk, concatenated (B, d). Forward: step 1 (no graph); backward: step 3."""

    @staticmethod
    def forward(ctx, encode: Callable[..., torch.Tensor], chunks: list[tuple[torch.Tensor, ...]],
                anchor: torch.Tensor) -> torch.Tensor:
        device = chunks[0][0].device
        ctx.encode, ctx.chunks, ctx.device, ctx.states = encode, chunks, device, []
        ctx.autocast = torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type)
        vectors = []
        for chunk in chunks:  # a Function's forward runs without a graph
            ctx.states.append(random_state(device))
            vectors.append(encode(*chunk))  # (N, d)
        return torch.cat(vectors)  # (B, d)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[None, None, None]:
        enabled, dtype = ctx.autocast

        def encode_as_in_step_1(*chunk: torch.Tensor) -> torch.Tensor:  # under the same autocast
            with torch.autocast(ctx.device.type, dtype=dtype, enabled=enabled):
                return ctx.encode(*chunk)

        backward_in_chunks(encode_as_in_step_1, ctx.chunks, ctx.states, grad)
        return None, None, None  # the parameters' gradients are in their .grad already


# Exercise 12 (ASSIGNMENTS.md)
def backward_in_chunks(encode: Callable[..., torch.Tensor], chunks: list[tuple[torch.Tensor, ...]],
                       states: list[tuple], grad: torch.Tensor) -> None:
    """Step 3: for each chunk, from the random state it started from in step 1 (states), encode it again with
    its graph and back-propagate its rows of grad (B, d), the cached gradient. The run's own random state is
    as it was before, afterwards."""
    device = chunks[0][0].device
    start = 0
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # put back afterwards
        for chunk, state in zip(chunks, states):
            set_random_state(state, device)  # the draws of this chunk in step 1
            with torch.enable_grad():
                z = encode(*chunk)  # (N, d), now with its graph
            torch.autograd.backward(z, grad[start : start + len(z)])  # .grad += g_chunk . dz_chunk / dtheta
            start += len(z)


def in_chunks(input_ids: torch.Tensor, attention_mask: torch.Tensor, size: int) -> list[tuple[torch.Tensor, ...]]:
    """(ids, mask) of `size` sentences each, their padding cut to the chunk's longest sentence."""
    chunks = []
    for ids, mask in zip(input_ids.split(size), attention_mask.split(size)):
        longest = int(mask.sum(1).max())
        chunks.append((ids[:, :longest], mask[:, :longest]))
    return chunks


def in_cached_chunks(encode: Callable[..., torch.Tensor], input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     size: int, cache: bool = True) -> torch.Tensor:
    """encode(ids, mask) of the batch, `size` sentences at a time, through CachedVectors (B, d). cache=False: the
    chunks encoded with their graphs kept, what the cached gradient must equal (the tests compare them)."""
    chunks = in_chunks(input_ids, attention_mask, size)
    if not cache:
        return torch.cat([encode(*chunk) for chunk in chunks])
    anchor = torch.empty(0, requires_grad=True)  # a Function's output has a gradient only if an input has one
    return CachedVectors.apply(encode, chunks, anchor)  # (B, d)


class CachedPasses:
    """The encoder passes of a ConSERT objective (encode; the unaugmented pass of the supervised one), `micro_batch`
    sentences at a time through CachedVectors: the whole batch's loss and gradient, one chunk's graph in memory.
    With cache=False the chunks are encoded with their graphs kept (the same draws, all in memory): what the
    cached gradient must equal, and what the tests compare it with. Named first among a class's bases (below)."""

    micro_batch: int
    cache: bool = True
    backward_per_chunk = True  # distributed.ddp leaves it unwrapped: DDP would reduce each chunk's backward

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, view: View) -> torch.Tensor:
        encode = super().encode
        return in_cached_chunks(lambda ids, mask: encode(ids, mask, view), input_ids, attention_mask,
                                self.micro_batch, self.cache)  # (B, d)

    def unaugmented(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> UnaugmentedPass:
        unaugmented = super().unaugmented
        z = in_cached_chunks(lambda ids, mask: unaugmented(ids, mask).z, input_ids, attention_mask,
                             self.micro_batch, self.cache)  # (B, d)
        return UnaugmentedPass(z, None, attention_mask)  # no embedding output: only the adversarial view reads it


class ChunkedConSERTLoss(CachedPasses, ConSERTLoss):
    """consert.ConSERTLoss (the unsupervised objective) with CachedPasses."""

    def __init__(self, encoder: SentenceEncoder, views: tuple[View, View], micro_batch: int, cache: bool = True,
                 **settings):
        super().__init__(encoder, views, **settings)
        self.micro_batch, self.cache = micro_batch, cache


class ChunkedSupervisedConSERTLoss(CachedPasses, SupervisedConSERTLoss):
    """consert.SupervisedConSERTLoss (sup, joint) with CachedPasses."""

    def __init__(self, encoder: SentenceEncoder, views: tuple[View, View], nli_classes: int, micro_batch: int,
                 cache: bool = True, joint: bool = False, **settings):
        if joint and "adversarial" in [view.name for view in views]:  # "sup" trains the classifier alone: no views
            raise ValueError("--micro-batch cannot take the adversarial view: its perturbation is a gradient "
                             "through the whole batch's loss, inside the forward pass")
        super().__init__(encoder, views, nli_classes, joint=joint, **settings)
        self.micro_batch, self.cache = micro_batch, cache


class ChunkedSupervisedLoss(SupervisedLoss):
    """finetune.SupervisedLoss (the same forward) whose columns are encoded `micro_batch` sentences at a time
    through CachedVectors: the whole batch's in-batch negatives or CoSENT, one chunk's graph in memory."""

    backward_per_chunk = True  # distributed.ddp leaves it unwrapped: DDP would reduce each chunk's backward

    def __init__(self, encoder: SentenceEncoder, micro_batch: int, cache: bool = True, **options):
        super().__init__(encoder, **options)
        self.micro_batch, self.cache = micro_batch, cache

    def vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        encode = lambda ids, mask: SupervisedLoss.vectors(self, ids, mask)
        return in_cached_chunks(encode, input_ids, attention_mask, self.micro_batch, self.cache)  # (B, d)
