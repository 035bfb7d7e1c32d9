"""The one way a student's code talks to the judge (course/judge.py): a frame of bytes, never pickle.

    MAGIC, then 8 bytes (little-endian) n, then n bytes of JSON (numbers, strings, lists, dicts: data only), then a
    safetensors file (tensors only: a header and raw bytes, nothing that runs when read).

The judge writes the worker's request in this format and reads the worker's answer in it. Reading an answer checks
everything a hostile writer could get wrong on purpose: the size (at most `limit` bytes), the magic, the lengths,
the JSON, the tensors' format and dtypes. Any fault is a ChannelError with one line saying what was wrong.
"""
from __future__ import annotations

import json
import struct

import torch

MAGIC = b"ASSIGNMENTS-FRAME-1\n"
LIMIT = 64 * 2**20  # bytes an answer may have: far more than any exercise's outputs
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool)


class ChannelError(ValueError):
    """A frame that is not one: what was wrong with it, in one line."""


def encode(values: object, tensors: dict[str, torch.Tensor] | None = None) -> bytes:
    """One frame: `values` as JSON (data only) and `tensors` as a safetensors file."""
    from safetensors.torch import save

    text = json.dumps(values, allow_nan=True).encode("utf-8")
    blob = save({name: t.detach().cpu().contiguous().clone()
                 for name, t in (tensors or {}).items()}) if tensors else b""
    return MAGIC + struct.pack("<Q", len(text)) + text + blob


def decode(frame: bytes, limit: int = LIMIT) -> tuple[object, dict[str, torch.Tensor]]:
    """(values, tensors) of a frame, after checking it whole; ChannelError otherwise."""
    from safetensors.torch import load

    if len(frame) > limit:
        raise ChannelError(f"it handed back more than {limit // 2**20} MB")
    if not frame:
        raise ChannelError("it handed back nothing")
    if not frame.startswith(MAGIC) or len(frame) < len(MAGIC) + 8:
        raise ChannelError("it handed back something that is not the judge's format")
    (n,) = struct.unpack("<Q", frame[len(MAGIC): len(MAGIC) + 8])
    start = len(MAGIC) + 8
    if start + n > len(frame):
        raise ChannelError("it handed back a frame cut short")
    try:
        values = json.loads(frame[start: start + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ChannelError("it handed back values that are not JSON") from None
    blob = frame[start + n:]
    try:
        tensors = load(blob) if blob else {}
    except Exception:  # safetensors raises its own errors on a bad header or bad lengths
        raise ChannelError("it handed back tensors that are not a safetensors file") from None
    for name, t in tensors.items():
        if t.dtype not in DTYPES:
            raise ChannelError(f"it handed back tensor {name!r} of dtype {t.dtype}")
    return values, tensors
