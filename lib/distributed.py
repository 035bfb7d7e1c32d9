"""Several processes (torchrun): N processes train exactly like one process with the whole batch.

Each process holds its share of every batch (data.BatchSampler deals the global batch out). The methods'
losses take the two functions that make theirs the loss of the GLOBAL batch, differentiable in this process's
share only (tsdae.TSDAELoss(global_mean=...), consert.ConSERTLoss(gather=...); the experiments pass them):

  global_mean(total, count)      sum over all processes / count over all processes
  gather_with_local_grad(x)      every process's rows of x; only this process's carry gradient
  this_process_only(objective)   the same objective without them: what the main process computes by itself
  ddp(objective, device)         DistributedDataParallel that SUMS the processes' gradients: each is the
                                 gradient of its own share of the global loss, so the sum is the gradient
  sum_gradients(wrapped)         the same sum, for an objective DDP cannot wrap (gradcache.py's)
  main_process_says(flag)        the main process's flag on every process: its decision to stop early, which it
                                 alone can take (it alone evaluates)

On one process every function here is the identity.
"""
from __future__ import annotations

import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn


def init() -> tuple[int, int]:
    """(rank, world size). Under torchrun (RANK/WORLD_SIZE set) joins the process group: NCCL on CUDA, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return rank(), world_size()


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    """This process's number (0 = the main process, which logs, evaluates and writes files)."""
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def global_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """total / count over the global batch, from this process's `total` and `count`. The other processes'
    sums enter as constants: each process differentiates its own part."""
    if world_size() == 1:
        return total / count
    others = torch.stack([total.detach().float(), count.float()])
    dist.all_reduce(others)  # (global sum, global count)
    return (total + (others[0] - total.detach())) / others[1]


def main_process_says(flag: bool) -> bool:
    """The main process's `flag`, on every process (they all call this at the same step)."""
    if world_size() == 1:
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    said = torch.tensor([float(flag)], device=device)
    dist.broadcast(said, src=0)
    return bool(said.item())


def own_rows(x: torch.Tensor) -> torch.Tensor:
    """The rows of this batch, as they are: what one process contrasts (the losses' default `gather`)."""
    return x


def gather_with_local_grad(x: torch.Tensor) -> torch.Tensor:
    """Every process's rows of `x` (N_r, ...), concatenated in rank order. Only this process's rows carry
    gradient (see global_mean). Shares may differ by one row."""
    if world_size() == 1:
        return x
    sizes = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(world_size())]
    dist.all_gather(sizes, torch.tensor([len(x)], device=x.device))
    longest = int(max(sizes))
    parts = [torch.empty(longest, *x.shape[1:], dtype=x.dtype, device=x.device) for _ in sizes]
    padded = torch.cat([x.detach(), x.new_zeros(longest - len(x), *x.shape[1:])])  # all_gather needs equal shapes
    dist.all_gather(parts, padded)
    parts = [part[: int(n)] for part, n in zip(parts, sizes)]
    parts[dist.get_rank()] = x
    return torch.cat(parts)


def this_process_only(objective: nn.Module) -> nn.Module:
    """A shallow copy of a method's objective (the same parameters) whose loss is this process's share alone:
    its global_mean and gather as on one process. For what the main process computes by itself while the others
    train on (the held-out loss): a collective there would wait for processes that never join it."""
    alone = copy.copy(objective)
    if hasattr(alone, "global_mean"):  # tsdae.TSDAELoss
        alone.global_mean = lambda total, count: total / count
    if hasattr(alone, "gather"):  # consert.ConSERTLoss
        alone.gather = lambda x: x
    return alone


def ddp(objective: nn.Module, device: torch.device) -> nn.Module:
    """The objective itself on one process; else DistributedDataParallel whose gradient all-reduce SUMS
    (DDP's own hook averages, which would divide each process's share of the global gradient by N). An objective
    whose backward runs backward passes of its own (gradcache.py's, one per chunk: DDP would reduce each) stays
    itself, and sum_gradients adds the processes' gradients after the backward pass."""
    if world_size() == 1 or getattr(objective, "backward_per_chunk", False):
        return objective
    wrapped = nn.parallel.DistributedDataParallel(objective, device_ids=[device] if device.type == "cuda" else None)
    wrapped.register_comm_hook(None, _sum_gradients)
    return wrapped


def _sum_gradients(state, bucket):  # (None, dist.GradBucket) -> Future; DDP refuses string annotations here
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])


def sum_gradients(wrapped: nn.Module) -> None:
    """After the backward pass: each gradient summed over the processes, unless DDP has done it (see ddp)."""
    if world_size() == 1 or isinstance(wrapped, nn.parallel.DistributedDataParallel):
        return
    for p in wrapped.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
