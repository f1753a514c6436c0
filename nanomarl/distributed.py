"""Several processes under torchrun: join the process group, sum gradients and counts across ranks,
and seed each rank; plus the default device and seed_everything for a plain `python script.py`.

One process (no torchrun) makes every helper here a no-op. A learner may skip this module.
"""
from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch
import torch.nn as nn

_JOINED = False  # init_distributed made this process's group (finish_distributed destroys it)


def is_main_process() -> bool:
    return world_info()[0] == 0


def world_info() -> tuple[int, int]:
    """(rank, world_size); (0, 1) without torchrun."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def seed_sampling_per_rank(seed: int):
    """Under torchrun, once every rank has built the same parameters from `seed`: reseed each rank
    with seed + 100003·rank, so the processes sample different responses. One process: no
    change."""
    rank, world = world_info()
    if world > 1:
        seed_everything(seed + 100003 * rank)


def init_distributed(device: str = "") -> tuple[int, int, str]:
    """Under torchrun (RANK/WORLD_SIZE set): join the process group (NCCL with one GPU per process,
    gloo on CPU or with --device cpu) and silence the stdout of every rank but 0 (errors still reach
    stderr). Returns (rank, world_size, device); (0, 1, device or default_device()) for a plain
    `python script.py`."""
    global _JOINED
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return 0, 1, device or default_device()
    use_cuda = torch.cuda.is_available() and not device.startswith("cpu")
    if not torch.distributed.is_initialized():
        # torch.distributed.nn's functions default to group=group.WORLD, read at its first import
        # (transformers imports it to load a model). Imported after the group exists, they would
        # keep it alive past destroy_process_group, and its gloo threads would then free tensors
        # while the interpreter shuts down: an abort at exit. Imported first, they hold None.
        import torch.distributed.nn as distributed_nn  # noqa: F401
        torch.distributed.init_process_group(backend="nccl" if use_cuda else "gloo")
        _JOINED = True
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if torch.distributed.get_rank() > 0:
        sys.stdout = open(os.devnull, "w")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    return rank, world, f"cuda:{local_rank}" if use_cuda else "cpu"


def rank_rows(rows: torch.Tensor, group_size: int = 1) -> torch.Tensor:
    """This rank's local rows among `rows`, labels of ONE process's batch, where question g holds
    rows g·K .. g·K+K-1 (K = group_size); under torchrun question g is local question g // world
    of rank g % world. So N processes cut a minibatch into the rows one process would take."""
    rank, world = world_info()
    question, sample = rows // group_size, rows % group_size
    mine = question % world == rank
    return question[mine] // world * group_size + sample[mine]


def allreduce_gradients(params: list[nn.Parameter]):
    """Sum the gradients of the trainable parameters across ranks: the LoRA/head version of DDP. A
    rank without a gradient for p (no rows for it) adds zeros; where no rank has one, p.grad stays
    None and the optimiser skips p, as one process would."""
    if world_info()[1] == 1:
        return
    had_grad = allreduce_sum(torch.tensor([p.grad is not None for p in params], dtype=torch.float,
                                          device=params[0].device))
    for p, anywhere in zip(params, had_grad.tolist()):
        if anywhere:
            p.grad = torch.zeros_like(p) if p.grad is None else p.grad
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)


def allreduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum a tensor across ranks (token counts: every rank normalises by the global count)."""
    if world_info()[1] > 1:
        x = x.clone()
        torch.distributed.all_reduce(x, op=torch.distributed.ReduceOp.SUM)
    return x


def finish_distributed():
    """Leave the process group at the end of a torchrun script (else gloo aborts at exit): only the
    one init_distributed joined. A group someone else made (a vLLM engine in this process makes one
    of its own) is theirs to destroy, at their exit, after their subgroups."""
    global _JOINED
    if _JOINED and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    _JOINED = False


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def seed_everything(seed: int):
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
