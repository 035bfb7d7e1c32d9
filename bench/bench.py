"""Side-by-side benchmark: this repo against sentence-transformers, on the same data, model and threads.

    python bench/bench.py                 # the full run (a few minutes on 2 CPU cores)
    python bench/bench.py --quick         # a smoke test (tiny settings, about a minute)
    python bench/bench.py --only ours     # without sentence-transformers
    python bench/bench.py --device cuda   # the same bench on a GPU

What is measured (each row of the table)
----------------------------------------
  TSDAE training   sentences/s of optimizer steps (batch 8, max length 75, AdamW lr 3e-5, grad clip 1.0).
                   Ours: tsdae.TSDAELoss built with fast.py's pieces as `python tsdae.py` builds it (and, in the
                   "plain" row, as `python tsdae.py --plain` runs it), on tsdae.py's batches (data.BatchSampler:
                   plain shuffled batches; the "bucketed" row: --bucketing, other batches), padding to a multiple
                   of 8 on CUDA only (data.pad_multiple). Theirs: DenoisingAutoEncoderLoss(tie_encoder_decoder=True)
                   on a SentenceTransformer(Transformer(max_seq_length=75), Pooling('cls')), on the SAME batches as
                   ours, each padded to its longest sentence, as the library's collator pads.
                   Both get the SAME (damaged, original) token ids, built once here with tsdae.DenoisingDataset
                   (deletion, ratio 0.6, seed 0), and the timed steps see the same batches.
                   The loss is the same: cross-entropy averaged over the batch's non-pad label tokens.
  encode           sentences/s of SentenceEncoder.encode (fast.PackedBert; plain) vs SentenceTransformer.encode
                   (batch 64, the model's max length 256, tokenisation included), on the same sentences.
  ConSERT training sentences/s of optimizer steps of our ConSERT objective, fast and plain (no reference).
  matmul peak      a large square matmul (fp32 unless --amp) timed in the same run with the same threads:
                   the denominator of "% of peak".

How
---
Every measurement runs in its own fresh child process (this file with --_job), which sets
torch.set_num_threads(--threads) (and RAYON_NUM_THREADS for the Rust tokenizer), warms up untimed, then
times with torch.cuda.synchronize() around the clock on CUDA. Peak memory is that child's own peak:
resource.getrusage(RUSAGE_SELF).ru_maxrss (whole process, imports and model loading included), and on CUDA
also torch.cuda.max_memory_allocated(). The systems are interleaved: every round runs each of them once,
ours and theirs alternating which goes first, and the table shows the median over --rounds rounds with
the min-max range, so slow drift of a shared machine hits both sides alike.

How FLOPs are counted (useful work only)
----------------------------------------
2 FLOPs per multiply-accumulate of every matmul the step needs on REAL (non-pad) tokens; padding,
recomputation, embeddings lookups, LayerNorm, GELU, softmax and the optimizer are not counted.
See `encoder_macs`, `decoder_macs`. For a sentence of n real tokens, hidden size d, feed-forward size f,
vocabulary V, per layer:
  projections Q, K, V, out   4 n d^2
  feed-forward               2 n d f
  attention scores QK^T      n^2 d      (all heads together)
  attention values PV        n^2 d
TSDAE decoder on the original sentence: m = n_original - 1 positions (= its label tokens); causal
self-attention is counted as the full m x m (what a fused kernel computes; the causal half would be
m(m+1)/2); cross-attention over the one sentence vector needs only its V and out projections (2 d^2)
and the mix of the h heads' projected values at each position (m h d): the softmax over one key is 1,
so Q and K are not needed (fast.SentenceVectorAttention); then the LM head: transform m d^2 and
vocabulary projection m d V. Training = 3 x forward (backward costs two forward matmuls).
encode = forward only. The same count is used for both systems (same data), so the GFLOP/s ratio
equals the sentences/s ratio: the library does more arithmetic (on padding) but gets no credit for it.
"""
from __future__ import annotations

import argparse
import csv
import functools
import importlib.util
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch

from arms import publish
from lib import weights
from lib import cli
import consert
import data
from speedups import fast
import model
import train
import tsdae
from commands import tsdae_train

TRAIN_BATCH, TRAIN_MAX_LENGTH, LR, GRAD_CLIP = 8, 75, 3e-5, 1.0
ENCODE_BATCH = 64
NOISE_RATIO, SEED = 0.6, 0


# ----------------------------------------------------------------------------
# The corpus: STS-benchmark train sentences


def read_sts_train(data_dir: Path) -> list[str]:
    """Both sentences of every row of sts-train.csv (tab-separated, columns 5 and 6, no quoting), unique, in order."""
    path = Path(data_dir) / "stsbenchmark" / "sts-train.csv"
    if not path.exists():
        sys.exit(f"error: {path} not found; pass --data-dir (the folder that holds stsbenchmark/), set EVAL_DATA_DIR, "
                 "or run python evaluate.py --fetch-data data")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return list(dict.fromkeys(s.strip() for r in rows for s in (r[5], r[6]) if s.strip()))


# ----------------------------------------------------------------------------
# Useful FLOPs (see the module docstring)


def encoder_macs(n: int, cfg: model.BertConfig) -> int:
    """Multiply-accumulates of one encoder forward pass over a sentence of n real tokens."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    per_layer = n * (4 * d * d + 2 * d * f) + 2 * n * n * d  # projections + feed-forward, scores + values
    return cfg.num_hidden_layers * per_layer


def decoder_macs(m: int, cfg: model.BertConfig) -> int:
    """Multiply-accumulates of one TSDAE decoder forward pass with m positions (= m label tokens)."""
    d, f, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    self_block = m * (4 * d * d + 2 * d * f) + 2 * m * m * d  # causal counted as the full m x m
    cross = 2 * d * d + m * cfg.num_attention_heads * d  # V, out on the one vector; mix heads per position
    lm_head = m * d * d + m * d * V  # transform + vocabulary projection, label tokens only
    return cfg.num_hidden_layers * (self_block + cross) + lm_head


def tsdae_step_flops(damaged_lengths: list[int], original_lengths: list[int], cfg: model.BertConfig) -> int:
    """Useful FLOPs of TSDAE training steps: encoder on damaged tokens, decoder on original ones, x3 for backward."""
    macs = sum(encoder_macs(n, cfg) for n in damaged_lengths) + sum(decoder_macs(n - 1, cfg) for n in original_lengths)
    return 3 * 2 * macs


def encode_flops(lengths: list[int], cfg: model.BertConfig) -> int:
    """Useful FLOPs of encoding: one forward pass, no backward."""
    return 2 * sum(encoder_macs(n, cfg) for n in lengths)


def consert_step_flops(lengths: list[int], cfg: model.BertConfig, views: int = 2) -> int:
    """ConSERT: `views` augmented copies of each sentence through the encoder, x3 for backward.
    (Views that change length, like token cutoff, are counted at the original length.)"""
    return 3 * views * 2 * sum(encoder_macs(n, cfg) for n in lengths)


# ----------------------------------------------------------------------------
# Helpers that run inside a child process


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(device: torch.device) -> dict:
    """This process's peak resident memory in MB (ru_maxrss is KiB on Linux, bytes on macOS), plus CUDA's."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"peak_rss_mb": rss / 2**20 if sys.platform == "darwin" else rss / 2**10}
    if device.type == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def optimizer_steps(loss_fn, params: list, optimizer, batches, steps: int, device: torch.device, amp: str,
                    scaler) -> list[float]:
    """The plain training loop, the same for both systems: forward, backward, clip, AdamW step.
    Takes `steps` batches from the iterator `batches` (collation happens inside it, so it is timed too)."""
    dtype = AMP_DTYPES[amp]
    losses = []
    for _ in range(steps):
        batch = next(batches)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(batch)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())  # both loops log the loss each step (one device sync per step on CUDA)
    return losses


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def profiled(fn: Callable, device: torch.device) -> tuple:
    """fn() under torch.profiler: (its result, the top operators as a table, seconds inside matmul kernels,
    seconds inside all operators)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        out = fn()
    events = prof.key_averages()
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    matmul_us = sum(getattr(e, attr) for e in events if e.key in MATMUL_OPS)
    total_us = sum(getattr(e, attr) for e in events)
    return out, events.table(sort_by=attr, row_limit=12), matmul_us / 1e6, total_us / 1e6


def timed_training(loss_fn, params, optimizer, batches, warmup: int, steps: int, n_sentences: int, device,
                   amp, profile: bool = False) -> dict:
    """`warmup` untimed steps, then `steps` timed ones, all from one iterator over `batches` (so DataLoader
    workers start before the clock does). With `profile`, the timed steps run under torch.profiler."""
    batches = iter(batches)
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")
    optimizer_steps(loss_fn, params, optimizer, batches, warmup, device, amp, scaler)
    sync(device)
    kernel0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime  # CPU time in the OS kernel: mostly page faults
    t0 = time.perf_counter()
    timed = lambda: optimizer_steps(loss_fn, params, optimizer, batches, steps, device, amp, scaler)
    losses, table, matmul_seconds, op_seconds = profiled(timed, device) if profile else (timed(), None, None, None)
    sync(device)
    seconds = time.perf_counter() - t0
    kernel_ms = (resource.getrusage(resource.RUSAGE_SELF).ru_stime - kernel0) / steps * 1000
    result = {"seconds": seconds, "sentences": n_sentences, "mean_loss": sum(losses) / len(losses),
              "kernel_ms_per_step": kernel_ms}
    if profile:
        result.update(profile=table, matmul_seconds=matmul_seconds, op_seconds=op_seconds)
    return result


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# ----------------------------------------------------------------------------
# The jobs. Each runs in a fresh child process: `spec` is the settings, `work` the shared prepared data.


def job_matmul(spec: dict, work: dict, device: torch.device) -> dict:
    """Peak: the best of a few timed runs of an n x n @ n x n matmul, in the compute dtype."""
    n = spec["matmul_n"]
    dtype = AMP_DTYPES[spec["amp"]] or torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(2):
        torch.mm(a, b, out=c)
    sync(device)
    t0 = time.perf_counter()  # calibrate: repetitions for about 0.5 s per trial
    torch.mm(a, b, out=c)
    sync(device)
    reps = max(1, int(0.5 / max(time.perf_counter() - t0, 1e-6)))
    best = 0.0
    for _ in range(spec["matmul_trials"]):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        sync(device)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0))
    return {"gflops": best / 1e9, "n": n, "dtype": str(dtype).replace("torch.", "")}


class _PairsByKey(torch.utils.data.Dataset):
    """The prepared pairs, indexed the way data.BatchSampler asks: by (epoch, i)."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, key):
        return self.pairs[key[1]]


def our_tsdae_batches(work: dict, encoder, device: torch.device, bucketing: bool = False):
    """Our batches exactly as `python tsdae.py` would make them (tsdae_train.pair_loader with the CLI's defaults:
    plain shuffled batches, or length buckets with --bucketing; its padding, workers and pinned memory on
    CUDA), but over the prepared pairs, so the noise is not drawn inside the timed loop.
    Returns (batch order, loader factory)."""
    args = tsdae_train.parse_args(["--corpus", "unused", "--max-length", str(TRAIN_MAX_LENGTH)]
                            + (["--bucketing"] if bucketing else []))
    reference = tsdae_train.pair_loader(tsdae_train.denoising_pairs(work["train_sentences"], encoder, args), encoder,
                                        args, device)
    order = list(reference.batch_sampler.iter_batches(0))
    loader = lambda batches: torch.utils.data.DataLoader(
        _PairsByKey(work["pairs"]), batch_sampler=[[(0, i) for i in b] for b in batches],
        num_workers=reference.num_workers, pin_memory=reference.pin_memory, collate_fn=reference.collate_fn,
    )
    return order, loader


def their_tsdae_batches(work: dict) -> tuple[list[list[int]], Callable]:
    """The same batches as ours (tsdae.py's default: the same random order), collated the library's way: each
    side padded to its own longest sentence (no multiple-of-8), with token_type_ids."""
    pairs = work["pairs"]
    batches = list(data.BatchSampler([len(o) for _, o in pairs], TRAIN_BATCH, seed=SEED).iter_batches(0))

    def features(seqs):
        ids, mask = data.pad(seqs, pad_id=0, multiple=1)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}

    def collated(batch_list):
        for b in batch_list:
            yield [features([pairs[i][0] for i in b]), features([pairs[i][1] for i in b])]

    return batches, collated


def job_train_ours(spec: dict, work: dict, device: torch.device, plain: bool = False, bucketing: bool = False) -> dict:
    torch.manual_seed(SEED)
    encoder = model.SentenceEncoder.from_pretrained(spec["model"], pooling="cls", max_length=TRAIN_MAX_LENGTH,
                                                    bert_class=model.Bert if plain else fast.SparseLookupPackedBert)
    decoder_class = tsdae.TSDAEDecoder if plain else fast.PackedDecoder  # as tsdae_train.build_objective builds it
    objective = tsdae.TSDAELoss(encoder, tie=True, decoder_class=decoder_class).to(device).train()
    optimizer = train.make_optimizer(objective, train.TrainSettings(out=Path("."), steps=1, lr=LR), device)
    order, loader = our_tsdae_batches(work, encoder, device, bucketing)
    loss_fn = lambda batch: objective(to_device(batch, device))
    return timed_training(loss_fn, list(objective.parameters()), optimizer, loader(order[: spec["warmup"]] + order),
                          spec["warmup"], len(order), len(work["pairs"]), device, spec["amp"],
                          spec["profile"])


def job_train_theirs(spec: dict, work: dict, device: torch.device) -> dict:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    torch.manual_seed(SEED)
    transformer = Transformer(spec["model"], max_seq_length=TRAIN_MAX_LENGTH)
    st = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "cls")],
                             device=str(device))
    loss_module = DenoisingAutoEncoderLoss(st, tie_encoder_decoder=True).to(device).train()
    optimizer = torch.optim.AdamW(loss_module.parameters(), lr=LR, weight_decay=0.0)
    order, collated = their_tsdae_batches(work)
    loss_fn = lambda feats: loss_module([to_device(f, device) for f in feats], None)
    return timed_training(loss_fn, list(loss_module.parameters()), optimizer, collated(order[: spec["warmup"]] + order),
                          spec["warmup"], len(order), len(work["pairs"]), device, spec["amp"],
                          spec["profile"])


def timed_encode(encode, sentences: list[str], device: torch.device) -> dict:
    """Time one `encode(sentences, batch_size=...)` call after an untimed warm-up."""
    encode(sentences[:ENCODE_BATCH * 2], batch_size=ENCODE_BATCH)  # warm-up
    sync(device)
    t0 = time.perf_counter()
    vectors = encode(sentences, batch_size=ENCODE_BATCH)
    sync(device)
    return {"seconds": time.perf_counter() - t0, "sentences": len(sentences), "dim": vectors.shape[1]}


def job_encode_ours(spec: dict, work: dict, device: torch.device, plain: bool = False) -> dict:
    bert_class = model.Bert if plain else fast.PackedBert
    encoder = model.SentenceEncoder.from_pretrained(spec["model"], bert_class=bert_class).to(device)
    return timed_encode(encoder.encode, work["encode_sentences"], device)


def job_encode_theirs(spec: dict, work: dict, device: torch.device) -> dict:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(spec["model"], device=str(device))
    return timed_encode(st.encode, work["encode_sentences"], device)


def job_consert_ours(spec: dict, work: dict, device: torch.device, plain: bool = False) -> dict:
    """Our ConSERT objective with consert.py's defaults for unlabelled sentences (views feature cutoff 0.2 and
    token shuffle, temperature 0.1, encoder dropout off, plain shuffled batches); batches of TRAIN_BATCH, max length
    75."""
    torch.manual_seed(SEED)
    encoder = model.SentenceEncoder.from_pretrained(spec["model"], pooling="mean", max_length=TRAIN_MAX_LENGTH,
                                                    bert_class=model.Bert if plain else fast.PackedBert)
    consert.switch_off_dropout(encoder)
    objective = consert.ConSERTLoss(encoder, (consert.View("feature_cutoff", 0.2), consert.View("shuffle")))
    objective = objective.to(device).train()
    optimizer = train.make_optimizer(objective, train.TrainSettings(out=Path("."), steps=1, lr=LR), device)
    ids = work["consert_ids"]
    order = list(data.BatchSampler([len(s) for s in ids], TRAIN_BATCH, seed=SEED, bucketing=False).iter_batches(0))

    def collated(batch_list):
        for b in batch_list:
            yield to_device(consert.collate_sentences([ids[i] for i in b], encoder.bert.cfg.pad_token_id), device)

    return timed_training(objective, list(objective.parameters()), optimizer, collated(order[: spec["warmup"]] + order),
                          spec["warmup"], len(order), len(ids), device, spec["amp"], spec["profile"])


JOBS = {
    "matmul": job_matmul,
    "train_ours": job_train_ours, "train_plain": functools.partial(job_train_ours, plain=True),
    "train_bucketed": functools.partial(job_train_ours, bucketing=True),
    "train_theirs": job_train_theirs,
    "encode_ours": job_encode_ours, "encode_plain": functools.partial(job_encode_ours, plain=True),
    "encode_theirs": job_encode_theirs,
    "consert_ours": job_consert_ours, "consert_plain": functools.partial(job_consert_ours, plain=True),
}


def run_job(spec_path: str) -> None:
    """Child-process entry point: run one job and write its result (with this process's peak memory) as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    work = json.loads(Path(spec["work"]).read_text())
    result = JOBS[spec["job"]](spec, work, device)
    result.update(peak_memory(device))
    Path(spec["result"]).write_text(json.dumps(result))


# ----------------------------------------------------------------------------
# The parent: prepare the data once, run the jobs interleaved, print the table


def prepare(args, tokenizer, sentences: list[str], n_train: int) -> dict:
    """The shared inputs, built once: TSDAE (damaged, original) pairs, sentences to encode, ConSERT ids."""
    rng = random.Random(SEED)
    picked = rng.sample(sentences, min(n_train, len(sentences)))
    dataset = tsdae.DenoisingDataset(picked, tokenizer, TRAIN_MAX_LENGTH, noise="delete", ratio=NOISE_RATIO, seed=SEED)
    pairs = [dataset[(0, i)] for i in range(len(picked))]
    encode_sentences = random.Random(SEED + 1).sample(sentences, min(args.encode_sentences, len(sentences)))
    return {
        "train_sentences": picked,
        "pairs": pairs,
        "encode_sentences": encode_sentences,
        "consert_ids": data.tokenize(tokenizer, picked, TRAIN_MAX_LENGTH),
    }


def tokens_computed(work: dict, encoder) -> dict:
    """Tokens per sentence that each system's TSDAE step actually runs through the encoder's position-wise
    layers (projections, feed-forward: all but attention's scores), the decoder layers and the LM head,
    padding included, next to the real ones: where the speed-up comes from."""
    pairs, n = work["pairs"], len(work["pairs"])
    real = {"encoder": sum(len(d) for d, _ in pairs) / n, "decoder": sum(len(o) - 1 for _, o in pairs) / n}
    real["lm_head"] = real["decoder"]
    order, loader = our_tsdae_batches(work, encoder, torch.device("cpu"))
    ours = dict.fromkeys(real, 0)
    for b in loader(order):
        ours["encoder"] += int(b["damaged_mask"].sum())  # fast.PackedBert: real tokens only
        ours["decoder"] += int(b["original_mask"][:, 1:].sum())  # fast.PackedDecoder: label positions
        ours["lm_head"] += int(b["original_mask"][:, 1:].sum())  # and the LM head at label positions only
    batches, collated = their_tsdae_batches(work)
    theirs = dict.fromkeys(real, 0)
    for source, target in collated(batches):
        theirs["encoder"] += source["input_ids"].numel()
        positions = target["input_ids"][:, 1:].numel()
        theirs["decoder"] += positions
        theirs["lm_head"] += positions  # logits at every position, padding included
    return {"real": real, "ours": {k: v / n for k, v in ours.items()}, "theirs": {k: v / n for k, v in theirs.items()}}


def child_env(threads: int) -> dict:
    """The same environment for both systems (PyTorch's allocator settings included, whatever they are)."""
    env = dict(os.environ)
    env.update(RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true" if threads > 1 else "false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    return env


def spawn(job: str, base_spec: dict, tmp: Path, tag: str) -> dict:
    spec = {**base_spec, "job": job, "result": str(tmp / f"{tag}.result.json")}
    spec_path = tmp / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--_job", str(spec_path)], capture_output=True, text=True,
                          env=child_env(base_spec["threads"]))
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    result = json.loads(Path(spec["result"]).read_text())
    result["process_seconds"] = time.perf_counter() - t0
    return result


def summarise(runs: list[dict], flops: int | None, peak_gflops: float | None) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"] if runs else "not run"}
    rates = [r["sentences"] / r["seconds"] for r in ok]
    out = {"rate_median": statistics.median(rates), "rate_min": min(rates), "rate_max": max(rates), "runs": runs,
           "peak_rss_mb": max(r["peak_rss_mb"] for r in ok)}
    if "kernel_ms_per_step" in ok[0]:
        out["kernel_ms_per_step"] = statistics.median(r["kernel_ms_per_step"] for r in ok)
    if "peak_gpu_mb" in ok[0]:
        out["peak_gpu_mb"] = max(r["peak_gpu_mb"] for r in ok)
    if flops is not None:
        seconds = statistics.median(r["seconds"] for r in ok)
        out["gflops"] = flops / seconds / 1e9
        if peak_gflops:
            out["fraction_of_peak"] = out["gflops"] / peak_gflops
    return out


def machine_description(device: torch.device, threads: int) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} logical CPUs, {threads} torch threads, torch {torch.__version__}"
    if device.type == "cuda":
        text = f"GPU {torch.cuda.get_device_name(device)} ({text})"
    return text


NAMES = {"train": "TSDAE training", "encode": "encode", "consert": "ConSERT training"}
WHO_NAMES = {"ours": "ours (fast, the default)", "bucketed": "ours (fast, --bucketing: other batches)",
             "plain": "ours (--plain)", "theirs": "sentence-transformers"}


def report(record: dict) -> str:
    """The markdown table of a run, from its --json record alone (`--summary FILE` prints it again)."""
    results, gpu = record["results"], record["device"].startswith("cuda")
    head = ["system", "sentences/s median [min-max]", "ours / theirs", "peak RSS MB"]
    head += ["peak GPU MB"] if gpu else []
    head += ["useful GFLOP/s", "% of matmul peak"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for job, s in results.items():
        part, who = job.split("_", 1)
        name = f"{NAMES[part]}, {WHO_NAMES[who]}"
        if "error" in s:
            lines.append(f"| {name} | failed: {s['error'].splitlines()[-1][:100]} |" + " |" * (len(head) - 2))
            continue
        theirs = results.get(f"{part}_theirs", {})
        ratio = f"{s['rate_median'] / theirs['rate_median']:.2f}x" \
            if who != "theirs" and "rate_median" in theirs else ""
        cells = [name, f"{s['rate_median']:.1f} [{s['rate_min']:.1f}-{s['rate_max']:.1f}]", ratio,
                 f"{s['peak_rss_mb']:.0f}"]
        cells += [f"{s['peak_gpu_mb']:.0f}"] if gpu else []
        cells += [f"{s['gflops']:.1f}" if "gflops" in s else "",
                  f"{100 * s['fraction_of_peak']:.0f}%" if "fraction_of_peak" in s else ""]
        lines.append("| " + " | ".join(cells) + " |")
    peaks = [r for r in record["matmul"] if "error" not in r]
    if not peaks:
        lines.append(f"| matmul peak | failed: {record['matmul'][0]['error'].splitlines()[-1][:100]} |"
                     + " |" * (len(head) - 2))
    else:
        gflops = [r["gflops"] for r in peaks]
        cells = [f"matmul {peaks[0]['n']}^3 {peaks[0]['dtype']} (peak)", "", "", ""] + ([""] if gpu else [])
        cells += [f"{statistics.median(gflops):.1f} [{min(gflops):.1f}-{max(gflops):.1f}]", "100%"]
        lines.append("| " + " | ".join(cells) + " |")
    tokens = record["tokens_per_sentence"]
    if any(job.startswith("train_") for job in results):
        fmt = lambda t: " / ".join(f"{t[k]:.1f}" for k in ("encoder", "decoder", "lm_head"))  # noqa: E731
        lines += ["", f"TSDAE tokens per sentence computed (encoder / decoder / LM head): real {fmt(tokens['real'])}; "
                  f"ours {fmt(tokens['ours'])}" + (f"; sentence-transformers {fmt(tokens['theirs'])}"
                                                   if "train_theirs" in results else "")]
        kernel = [f"{job.split('_', 1)[1]} {s['kernel_ms_per_step']:.0f} ms" for job, s in results.items()
                  if job.startswith("train_") and "kernel_ms_per_step" in s]
        if kernel:
            lines.append("TSDAE CPU time in the OS kernel per step (mostly page faults on freshly allocated memory): "
                         + ", ".join(kernel))
    for job, s in results.items():  # --profile: the last round's top operators, the matmul kernels' share
        r = next((r for r in reversed(s.get("runs", [])) if "profile" in r), None)
        if r is not None:
            gflops = record["useful_flops"][job.split("_")[0]] / r["matmul_seconds"] / 1e9
            peak = record["matmul_peak_gflops"]
            lines += ["", f"{job} (profiled): matmul kernels {r['matmul_seconds']:.2f} s of {r['op_seconds']:.2f} s in "
                      f"operators ({r['matmul_seconds'] / r['op_seconds']:.0%}); useful work inside them {gflops:.1f} "
                      f"GFLOP/s" + (f", {gflops / peak:.0%} of the matmul peak" if peak else ""),
                      "", "```", r["profile"].rstrip("\n"), "```"]
    lines += ["", f"{record['machine']}. Command: `{record['command']}`"]
    return "\n".join(lines) + "\n"


def record_flags(p: argparse.ArgumentParser) -> None:
    """--json and --summary, the same in every bench script."""
    p.add_argument("--json", default=None, metavar="OUT",
                   help="also write every figure to this JSON file, its table to OUT.md and the documents quoting it")
    p.add_argument("--summary", default=None, metavar="JSON",
                   help="print the table of a saved --json run again (and write it where --json does); runs nothing")


def command_line(script: str, argv: list[str] | None) -> str:
    """The command a record names: python bench/SCRIPT ARGS."""
    return " ".join([f"python bench/{script}", *(argv if argv is not None else sys.argv[1:])])


def finish(record: dict, report: Callable[[dict], str], path: str | None) -> int:
    """A run's table on stdout; with --json OUT the record to OUT, its table beside it (OUT.md) and into the
    documents that quote it."""
    print(text := report(record), end="")
    if path:
        Path(path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        publish(Path(path).with_suffix(".md"), text.rstrip("\n"))
    return 0


def summary(path: str, report: Callable[[dict], str], script: str) -> int:
    """--summary JSON: a saved record's table again, from the record alone, printed and published as `finish` does."""
    try:
        text = report(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"error: {path} is not a --json record of {script} ({error})") from None
    publish(Path(path).with_suffix(".md"), text.rstrip("\n"))
    print(text, end="")
    return 0


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default=None,
                   help="folder with stsbenchmark/sts-train.csv "
                        "(default: $EVAL_DATA_DIR, else data/ in the repository)")
    p.add_argument("--model", default=None, help="BERT folder (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch threads in every measured process")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the table shows the median")
    p.add_argument("--train-steps", type=int, default=30, help="timed optimizer steps of batch 8 per training run")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps before the timed ones")
    p.add_argument("--encode-sentences", type=int, default=2000, help="sentences per timed encode")
    p.add_argument("--only", choices=["all", "ours"], default="all", help="ours: skip sentence-transformers")
    p.add_argument("--skip", nargs="*", default=[], choices=["train", "encode", "consert"], help="parts to leave out")
    p.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none", help="autocast for BOTH systems (CUDA)")
    p.add_argument("--no-plain", action="store_true", help="leave out the rows of our plain path (--plain)")
    p.add_argument("--quick", action="store_true", help="tiny settings for a smoke test")
    p.add_argument("--profile", action="store_true",
                   help="also profile the training steps: top operators and the matmul kernels' share (slower)")
    record_flags(p)
    p.add_argument("--_job", default=None, help=argparse.SUPPRESS)
    return p


def parse_args(argv=None) -> argparse.Namespace:
    args = make_parser().parse_args(argv)
    if args.quick:
        args.rounds, args.train_steps, args.warmup_steps, args.encode_sentences = 1, 3, 1, 128
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._job:
        run_job(args._job)
        return 0
    if args.summary:
        return summary(args.summary, report, "bench.py")
    device = cli.device(args.device)
    model_path = args.model or weights.default_model_path()
    encoder = model.SentenceEncoder.from_pretrained(model_path)  # its max length is the one encode uses
    cfg, tokenizer = encoder.bert.cfg, encoder.tokenizer
    from lib.taskfiles import default_data_dir

    sentences = read_sts_train(Path(args.data_dir) if args.data_dir else default_data_dir())
    work = prepare(args, tokenizer, sentences, args.train_steps * TRAIN_BATCH)
    train_encoder = model.SentenceEncoder(encoder.bert, tokenizer, "cls", TRAIN_MAX_LENGTH, source=encoder.source)
    tokens = tokens_computed(work, train_encoder)

    theirs = args.only == "all"
    if theirs and importlib.util.find_spec("sentence_transformers") is None:
        print("sentence-transformers is not installed: only our figures are shown", file=sys.stderr)
        theirs = False
    parts = [p for p in ("train", "encode", "consert") if p not in args.skip]
    systems = ["ours", "bucketed"] + ([] if args.no_plain else ["plain"]) + (["theirs"] if theirs else [])

    base_spec = {"model": model_path, "device": str(device), "threads": args.threads, "amp": args.amp,
                 "warmup": args.warmup_steps, "profile": args.profile,
                 "matmul_n": 8192 if device.type == "cuda" else 2048, "matmul_trials": 3}
    if args.quick:
        base_spec["matmul_trials"] = 1
    runs: dict[str, list[dict]] = {"matmul": []}
    print(f"bench: {machine_description(device, args.threads)}; {args.rounds} rounds; training {args.train_steps} "
          f"steps of {TRAIN_BATCH} (max length {TRAIN_MAX_LENGTH}), encode {len(work['encode_sentences'])} sentences "
          f"(batch {ENCODE_BATCH}, max length {encoder.max_length}); amp {args.amp}", file=sys.stderr)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"note: load average {load:.1f} before starting: other processes are running, timings will be noisy"
              + (" (several threads per process on a busy machine can be far slower than one: try --threads 1)"
                 if args.threads > 1 else ""), file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        tmp = Path(tmp)
        base_spec["work"] = str(tmp / "work.json")
        (tmp / "work.json").write_text(json.dumps(work))
        for r in range(args.rounds):
            jobs = ["matmul"]
            for part in parts:
                group = [f"{part}_{who}" for who in systems if f"{part}_{who}" in JOBS]
                jobs += group if r % 2 == 0 else group[::-1]  # alternate who goes first
            for job in jobs:
                res = spawn(job, base_spec, tmp, f"{job}-{r}")
                runs.setdefault(job, []).append(res)
                shown = res.get("error", "").splitlines()[-1:] if "error" in res else (
                    [f"{res['gflops']:.1f} GFLOP/s"] if job == "matmul"
                    else [f"{res['sentences'] / res['seconds']:.1f} sentences/s, peak RSS {res['peak_rss_mb']:.0f} MB"
                          + (f", kernel {res['kernel_ms_per_step']:.0f} ms/step" if "kernel_ms_per_step" in res
                             else "")])
                print(f"  round {r + 1}/{args.rounds} {job:14s} {' '.join(shown)}", file=sys.stderr)

    ok_peaks = [r["gflops"] for r in runs["matmul"] if "error" not in r]
    peak_gflops = statistics.median(ok_peaks) if ok_peaks else None
    pairs = work["pairs"]
    flops = {
        "train": tsdae_step_flops([len(d) for d, _ in pairs], [len(o) for _, o in pairs], cfg),
        "encode": encode_flops([len(s) for s in data.tokenize(tokenizer, work["encode_sentences"],
                                                              encoder.max_length)], cfg),
        "consert": consert_step_flops([len(s) for s in work["consert_ids"]], cfg),
    }
    results = {}
    for part in parts:
        for who in systems:
            if f"{part}_{who}" in runs:
                results[f"{part}_{who}"] = summarise(runs[f"{part}_{who}"], flops[part], peak_gflops)
    record = {"command": command_line("bench.py", argv),
              "machine": machine_description(device, args.threads), "device": str(device), "settings": vars(args),
              "load_average_at_start": load, "tokens_per_sentence": tokens, "useful_flops": flops,
              "matmul_peak_gflops": peak_gflops, "matmul": runs["matmul"], "results": results}
    print()
    finish(record, report, args.json)
    return 0 if all("error" not in s for s in results.values()) and ok_peaks else 1


if __name__ == "__main__":
    sys.exit(main())
