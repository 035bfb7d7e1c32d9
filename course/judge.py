"""The judge: grading that no code of the student's can talk round.

The judge is the process that decides pass or fail. It generates every case's inputs itself, runs the student's
function in another process (course/worker.py, in the graded copy; as another user when it is given one), reads back
only that function's outputs over a checked channel (course/channel.py: JSON and safetensors, at most 64 MB, never
pickle), and compares them with what it expects, here, in its own process. So:

- the verdict is never written by the student's process: an early exit, a forged report line, a patched pytest,
  torch or numpy inside the worker changes nothing the judge computes; it only spoils that worker's own answer;
- a worker that ends without answering, answers in another format or too much, runs past WORKER_TIMEOUT, or leaves a
  process running after it answered scores 0 for that case, and the outcome says which;
- the held-back cases live in course/held_back.py, which never enters the worker's copy: their inputs cross the
  channel as data, their source stays with the judge;
- each case calls one exercise's function, never another's (course/probes.py gives the others PyTorch's own or a
  small random module), so an exercise's score depends on that exercise alone.

What a case expects comes from a library (PyTorch's fused attention, the safetensors package), from values worked
out by hand (average precision, checked against scikit-learn's in the tests), from a property the outputs must have
(counts, order, uniformity over many draws), or from the reference solution's outputs on the same inputs: computed
here when this repository holds the reference, else read from course/expected.frame, which make-student (public
cases) and make-autograder (all) write. No case holds a reference body, and no case's expected value lies within the
worker's reach.
"""
from __future__ import annotations

import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from course import channel

ROOT = Path(__file__).resolve().parent.parent
EXPECTED_FILE = "course/expected.frame"  # the reference's outputs, for a copy that holds no reference
WORKER_TIMEOUT = 300  # seconds the worker of one exercise may run, all its cases (importing torch included)
STDERR_KEPT = 4000  # characters of a worker's own output kept for the judge's log

# What happened to a case, in the words the student reads.
PASSED, FAILED, TIMED_OUT, NOT_WRITTEN, ENDED, BAD_ANSWER, LEFT_RUNNING = (
    "passed", "failed", "timed out", "not written yet", "ended without answering", "answered in no valid form",
    "left a process running")

Tensors = dict[str, torch.Tensor]


@dataclass
class Answer:
    """What a worker handed back: its outcome (answered, or how it failed) and, when it answered, its values."""
    outcome: str
    values: dict = field(default_factory=dict)
    tensors: Tensors = field(default_factory=dict)
    message: str = ""


@dataclass
class Case:
    """One check of one exercise: `inputs()` gives the probe's (values, tensors), `check(answer, inputs, expected)`
    returns None when the outputs are right, else what is wrong, in the student's words (the likely cause first).
    reference: the check needs the reference solution's outputs on the same inputs (`expected`)."""
    number: int
    name: str
    probe: str
    inputs: Callable[[], tuple[dict, Tensors]]
    check: Callable[[Answer, tuple[dict, Tensors], Answer | None], str | None]
    reference: bool = False
    held_back: bool = False

    @property
    def key(self) -> str:
        return f"{self.number}: {self.name}"


@dataclass
class Result:
    case: Case
    outcome: str
    message: str = ""


# ---------------------------------------------------------------------------------------------------------------
# Running the student's function in a worker


def read_limited(stream, limit: int, into: list[bytes]) -> None:
    """Read `stream` to its end, keeping at most limit + 1 bytes (more means too much) and dropping the rest."""
    kept = 0
    while chunk := stream.read(65536):
        if kept <= limit:
            into.append(chunk[: limit + 1 - kept])
            kept += len(into[-1])


def write_all(stream, data: bytes) -> None:
    """Write the request and close the stream; a worker that died or stopped reading loses it."""
    try:
        stream.write(data)
        stream.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run_worker(root: Path, calls: list[tuple[str, dict, Tensors]], user: str | None = None,
               timeout: float = WORKER_TIMEOUT) -> list[Answer]:
    """Run each (probe, values, tensors) call in one worker in `root` (as `user` when given), in a process group of
    its own, killed whole when it ends or runs out of time; read back its answers through the channel's checks. A
    worker that fails as a whole (no answer, too late, malformed) gives every call that outcome."""
    request = channel.encode({"calls": [{"probe": probe, "args": values} for probe, values, _ in calls]},
                             {f"{i}::{name}": t for i, (_, _, tensors) in enumerate(calls)
                              for name, t in tensors.items()})
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LANG": "C.UTF-8"}
    as_user = {}
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    process = subprocess.Popen([sys.executable, "-I", str(root / "course" / "worker.py")], cwd=root, env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, **as_user)
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [threading.Thread(target=read_limited, args=(process.stdout, channel.LIMIT, out), daemon=True),
               threading.Thread(target=read_limited, args=(process.stderr, STDERR_KEPT, err), daemon=True)]
    for reader in readers:
        reader.start()
    threading.Thread(target=write_all, args=(process.stdin, request), daemon=True).start()  # never blocks the judge
    timed_out = False
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    left_running = not timed_out and group_alive(process.pid)
    if timed_out or left_running:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the worker and every process it started in its group
        except ProcessLookupError:
            pass
        process.wait()
    for reader in readers:
        reader.join(5)
    whole = decide_worker(b"".join(out), timed_out, left_running, timeout)
    if isinstance(whole, Answer):
        return [whole] * len(calls)
    answers, outputs = whole
    results = []
    for i, answer in enumerate(answers):
        prefix = f"{i}::"
        if not isinstance(answer, dict) or not isinstance(answer.get("values", {}), dict):
            results.append(Answer(BAD_ANSWER, message="no valid answer: its values are not the judge's layout"))
        elif not answer.get("ok"):
            kind = NOT_WRITTEN if answer.get("not_written") else FAILED
            results.append(Answer(kind, message=f"your function raised {str(answer.get('error'))[:300]}"))
        else:
            results.append(Answer("answered", answer.get("values", {}),
                                  {n[len(prefix):]: t for n, t in outputs.items() if n.startswith(prefix)}))
    return results


def decide_worker(frame: bytes, timed_out: bool, left_running: bool, timeout: float) -> Answer | tuple[list, Tensors]:
    """The worker's outcome as a whole (an Answer saying how it failed), or its (answers, tensors) when it answered."""
    if timed_out:
        return Answer(TIMED_OUT, message=f"timed out after {timeout:g} s (an endless loop?)")
    try:
        values, outputs = channel.decode(frame)
    except channel.ChannelError as e:
        if not frame:
            return Answer(ENDED, message="the process running your function ended without handing back its result "
                                         "(os._exit, exit, a crash of Python or a kill)")
        return Answer(BAD_ANSWER, message=f"no valid answer: {e}")
    if left_running:
        return Answer(LEFT_RUNNING, message="your function left a process running after it returned (a fork of its "
                                            "own): it was killed, and the answer does not count")
    if not isinstance(values, dict) or not isinstance(values.get("answers"), list):
        return Answer(BAD_ANSWER, message="no valid answer: not the judge's layout")
    return values["answers"], outputs


# ---------------------------------------------------------------------------------------------------------------
# Checks the cases share


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tensor(answer: Answer, name: str, like: torch.Tensor | None = None) -> torch.Tensor:
    """The answer's tensor `name`; ValueError (a failed case, in one line) when it is missing or of another shape."""
    if name not in answer.tensors:
        raise ValueError(f"no output {name!r} (did your function return a tensor?)")
    t = answer.tensors[name]
    if like is not None and tuple(t.shape) != tuple(like.shape):
        raise ValueError(f"the output has shape {tuple(t.shape)}, expected {tuple(like.shape)}")
    return t


def differs(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> str | None:
    """None when equal within the tolerance, else how far apart, NaN and inf named first."""
    actual, expected = actual.double(), expected.double()
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.isnan().any() and not expected.isnan().any():
        return f"NaN at {int(actual.isnan().sum())} of {actual.numel()} entries"
    if actual.isinf().any() and not expected.isinf().any():
        return f"inf at {int(actual.isinf().sum())} entries"
    finite = expected.isfinite()
    if not torch.equal(actual.isfinite(), finite) or (finite.any() and not torch.allclose(
            actual[finite], expected[finite], atol=atol, rtol=rtol)):
        gap = (actual[finite] - expected[finite]).abs().max().item() if finite.any() else float("nan")
        return f"it differs from the expected values by up to {gap:.3g}"
    return None


def close_to(actual: torch.Tensor, other: torch.Tensor, atol: float = 1e-5) -> bool:
    return actual.shape == other.shape and bool(torch.allclose(actual.double(), other.double(), atol=atol,
                                                               equal_nan=True))


def first_cause(actual: torch.Tensor, alternatives: list[tuple[str, torch.Tensor]]) -> str | None:
    """The cause of the first known mistake whose output the student's equals."""
    return next((cause for cause, other in alternatives if close_to(actual, other)), None)


# ---------------------------------------------------------------------------------------------------------------
# Exercise 1: attention. Expected: PyTorch's fused kernel; causes named from the probabilities themselves (v = I)


def attention_inputs(seed: int, lq: int = 5, lk: int = 5, mask: str | None = "padding", identity_v: bool = False,
                     dropout_p: float = 0.0) -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        g = gen(seed)
        dh = lk if identity_v else 8
        q, k = torch.randn(2, 2, lq, dh, generator=g), torch.randn(2, 2, lk, dh, generator=g)
        v = torch.eye(lk).expand(2, 2, lk, lk).clone() if identity_v else torch.randn(2, 2, lk, dh, generator=g)
        t = {"q": q, "k": k, "v": v}
        if mask == "padding":  # the second sentence's last two keys are padding
            m = torch.ones(2, 1, 1, lk, dtype=torch.bool)
            m[1, ..., -2:] = False
            t["mask"] = m
        elif mask == "causal":
            t["mask"] = torch.ones(lq, lk, dtype=torch.bool).tril()
        elif mask == "float":  # a position bias per head, -inf where a query may not attend (no row all -inf)
            bias = torch.randn(1, 2, lq, lk, generator=g)
            bias[..., 0, -1] = float("-inf")
            bias[..., -1, 1:3] = float("-inf")
            t["mask"] = bias
        return {"dropout_p": dropout_p, "seed": seed}, t
    return make


def check_attention(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    _, t = inputs
    q, k, v, mask = t["q"], t["k"], t["v"], t.get("mask")
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    y = tensor(answer, "y", right)
    if "scaled_dot_product_attention" in answer.values.get("calls", []):
        return "it calls PyTorch's fused kernel (F.scaled_dot_product_attention): write the formula itself"
    gap = differs(y, right)
    if gap is None:
        return None
    alternatives = [("the scores are not divided by sqrt(d_head)",
                     F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0))]
    if mask is not None and not mask.is_floating_point():
        inverted = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
        sees_nothing = (~mask).expand(*q.shape[:-1], k.shape[-2]).sum(-1, keepdim=True) == 0  # (B, h, Lq, 1)
        alternatives += [("the mask inverted: True means the query MAY attend to that key", inverted),
                         ("the mask inverted: True means the query MAY attend to that key",
                          inverted.masked_fill(sees_nothing, float("nan"))),
                         ("a boolean mask added to the scores as numbers (True = 1): a boolean mask says which keys "
                          "a query may see; fill the others with -inf", F.scaled_dot_product_attention(
                              q, k, v, attn_mask=mask.float()))]
    if mask is not None and mask.is_floating_point():
        alternatives += [
            ("the float mask turned into a boolean one: a float mask is ADDED to the scores (MPNet's position bias), "
             "with -inf where a query may not attend", F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool())),
            ("the float mask turned into a boolean one (~mask.bool()): a float mask is ADDED to the scores (MPNet's "
             "position bias), with -inf where a query may not attend",
             F.scaled_dot_product_attention(q, k, v, attn_mask=~mask.bool())),
            ("the float mask's -inf positions are treated as visible: add the mask to the scores as it is",
             F.scaled_dot_product_attention(q, k, v, attn_mask=mask.nan_to_num(neginf=0.0)))]
    if mask is not None:
        alternatives.append(("the mask is ignored", F.scaled_dot_product_attention(q, k, v)))
    if q.shape == k.shape:
        alternatives.append(("queries and keys swapped: the scores are Q K^T, one row per query",
                             F.scaled_dot_product_attention(k, q, v, attn_mask=mask)))
    cause = first_cause(y, alternatives)
    if cause is None and v.shape[-1] == v.shape[-2] and torch.equal(v[0, 0], torch.eye(v.shape[-1])):
        probs = y.double()  # v = I: the output IS the attention probabilities
        if probs.isfinite().all() and torch.allclose(probs.sum(-2), torch.ones_like(probs.sum(-2)), atol=1e-5) \
                and not torch.allclose(probs.sum(-1), torch.ones_like(probs.sum(-1)), atol=1e-5):
            cause = "the softmax runs over the queries: each query's weights over the KEYS (the last dim) sum to 1"
        elif probs.isfinite().all() and not torch.allclose(probs.sum(-1), torch.ones_like(probs.sum(-1)), atol=1e-5):
            cause = "each query's weights over the keys do not sum to 1 (a softmax over the last dim?)"
    if cause is None and y.isnan().any():
        cause = "NaN: a query whose every key is masked, or a mask added as -inf times 0?"
    return f"{cause}. ({gap})" if cause else f"it is not softmax(Q K^T / sqrt(d_head)) V: {gap}"


def check_attention_dropout(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    y = tensor(answer, "y", expected.tensors["y"])
    without = F.scaled_dot_product_attention(inputs[1]["q"], inputs[1]["k"], inputs[1]["v"])
    if close_to(y, without):
        return "no dropout on the probabilities: with dropout_p > 0, drop (F.dropout) the attention probabilities"
    gap = differs(y, expected.tensors["y"])
    return None if gap is None else (f"dropout must act on the probabilities (F.dropout(probs, dropout_p), after the "
                                     f"softmax, before @ v): {gap}")


# ---------------------------------------------------------------------------------------------------------------
# Exercise 2: pooling. Expected: the reference's outputs; causes from simple wrong formulas


def pool_inputs(seed: int) -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        g = gen(seed)
        hidden = torch.randn(3, 6, 8, generator=g)
        mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
        hidden[mask == 0] = 1000.0  # padding that would show in any formula that reads it
        return {"modes": ["cls", "mean", "max"]}, {"hidden": hidden, "attention_mask": mask}
    return make


def check_pool(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    hidden = inputs[1]["hidden"]
    problems = []
    for mode in ("cls", "mean", "max"):
        y = tensor(answer, mode, expected.tensors[mode])
        gap = differs(y, expected.tensors[mode])
        if gap:
            cause = first_cause(y, [("padding counts in the mean: average over the real tokens only",
                                     hidden.mean(1)),
                                    ("padding can win the max: mask it out first", hidden.amax(1)),
                                    ("cls is the FIRST token's state", hidden[:, -1])])
            problems.append(f"{mode}: {cause + '. ' if cause else ''}({gap})")
    return "; ".join(problems) or None


# ---------------------------------------------------------------------------------------------------------------
# Exercise 3: word deletion. Expected: properties of the survivors over many sentences


def deletion_inputs(seed: int, ratio: float, sentences: int, words: int, runs: int = 1,
                    extra: list | None = None) -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        r = random.Random(seed)
        made = [[[1000 * s + i, r.randrange(100)] if i % 3 == 0 else [1000 * s + i] for i in range(words)]
                for s in range(sentences)]
        return {"sentences": (extra or []) + made, "ratio": ratio, "seed": seed, "runs": runs}, {}
    return make


def survivors(answer: Answer) -> list[list]:
    runs = answer.values.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(run, list) for run in runs):
        raise ValueError("delete_words did not return lists of words")
    return runs


def check_deletion(ratio: float, tolerance: float, per_word: bool = False) -> Callable:
    def check(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
        sentences = inputs[0]["sentences"]
        runs = survivors(answer)
        if answer.values.get("returned_its_input"):
            return "it returns `words` itself: return a new list"
        if answer.values.get("changed_its_input"):
            return "it changes `words`: leave the input as it is and return a new list"
        kept = removed = 0
        counts = []
        for words, out in zip(sentences, runs[0]):
            if not words:
                if out:
                    return "an empty sentence must stay empty"
                continue
            if not out:
                return "a sentence lost every word: when all are deleted, keep one (rng.choice(words))"
            position = iter(words)
            if not all(any(w == x for x in position) for w in out):
                return "the survivors are not the sentence's own words in their order"
            kept, removed = kept + len(out), removed + len(words) - len(out)
            counts.append(len(out))
        share = removed / max(kept + removed, 1)
        if abs(share - ratio) > tolerance:
            return f"it deletes {share:.3f} of the words, expected {ratio} +- {tolerance}"
        if len(runs) > 1 and runs[0] != runs[1]:
            return "the same seed gave other survivors: draw only from `rng`"
        if len(set(map(str, runs[0][len(sentences) // 2:]))) < 2:
            return "every sentence lost the same words: draw afresh for each sentence"
        if per_word:
            n = len(sentences[-1])
            mean = sum(counts) / len(counts)
            variance = sum((c - mean) ** 2 for c in counts) / len(counts)
            if ratio < 1 and variance < 0.5 * n * ratio * (1 - ratio):
                return ("the number of survivors hardly varies: delete each word on its own, one rng.random() per "
                        "word, not a count drawn once per sentence")
        return None
    return check


def check_deletion_of_everything(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    runs = survivors(answer)
    sentences = inputs[0]["sentences"]
    if any(len(out) != (1 if words else 0) for words, out in zip(sentences, runs[0])):
        return "at ratio 1 every word goes: keep exactly one (an empty sentence stays empty)"
    picked = {words.index(out[0]) if out[0] in words else -1 for words, out in zip(sentences, runs[0]) if words}
    if -1 in picked:
        return "the survivor must be one of the sentence's own words"
    if len(picked) < 3:
        return "when every word is deleted, keep one drawn at random with rng.choice, not always the same one"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Exercises 6, 7, 10: the views. Expected: what each view may change, and how often, over many draws


def view_inputs(seed: int, times: int, function: str = "", rate: float = 0.0) -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        g = gen(seed)
        mask = torch.tensor([[1] * 10, [1] * 7 + [0] * 3, [1] * 4 + [0] * 6])
        x = torch.rand(3, 10, 8, generator=g) + 0.5  # no zero to start with
        return {"function": function, "rate": rate, "times": times, "seed": seed}, {"x": x, "attention_mask": mask}
    return make


def same_every_call(ys: torch.Tensor) -> bool:
    """True when the calls' outputs (times, ...) are all one."""
    return len({str(y.tolist()) for y in ys}) < 2


def uneven(counts: torch.Tensor, mean: float) -> bool:
    """True when a count lies further from the uniform mean than chance allows: 5 sd (Poisson: sqrt(mean)) + 2."""
    return bool(((counts - mean).abs() > 5 * math.sqrt(mean) + 2).any())


def check_cutoff(kind: str, uniform: bool = False) -> Callable:
    def check(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
        args, t = inputs
        x, mask, rate = t["x"], t["attention_mask"], args["rate"]
        ys = tensor(answer, "y", torch.empty(args["times"], *x.shape))
        cut = ys == 0  # (times, B, L, d)
        if not torch.equal(ys[~cut], x.expand_as(ys)[~cut]):
            return "it changes entries it does not cut: the cut ones become 0, the others stay as they are"
        if kind == "token":
            rows = cut.all(-1)
            if not torch.equal(cut, rows[..., None].expand_as(cut)):
                return "token cutoff zeroes whole token rows (every feature of a token), not single entries"
            if (rows & (mask == 0)).any():
                return "a padding row is cut: choose among the real tokens only"
            want = (mask.sum(1).double() * rate).long()
            got = rows.sum(-1)  # (times, B)
            if not (got == want).all():
                return f"it cuts {got[0].tolist()} rows of sentences of {mask.sum(1).tolist()} real tokens: " \
                       f"cut int(n * rate) = {want.tolist()}"
            counts = rows.sum(0).double()[mask.bool()]
        else:
            columns = cut.all(-2)  # (times, B, d)
            if not torch.equal(cut, columns[:, :, None, :].expand_as(cut)):
                return "feature cutoff zeroes whole feature columns (one feature at every position), not single entries"
            want = int(x.shape[-1] * rate)
            if not (columns.sum(-1) == want).all():
                return f"it cuts {columns.sum(-1)[0].tolist()} columns: cut int(d * rate) = {want} in each sentence"
            if all(torch.equal(columns[0, 0], columns[0, b]) for b in range(1, columns.shape[1])) and \
                    all(torch.equal(columns[i, 0], columns[i, 1]) for i in range(columns.shape[0])):
                return "every sentence loses the same columns: choose them per sentence"
            counts = columns.sum(0).double().flatten()
        if same_every_call(cut):
            return "every call cuts the same: draw afresh on each call"
        if uniform and uneven(counts, float(counts.mean())):
            return "some tokens or features are cut far more often than others: each must be equally likely"
        return None
    return check


def check_shuffle(uniform: bool = False) -> Callable:
    def check(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
        args, t = inputs
        mask = t["attention_mask"]
        ys = tensor(answer, "y", torch.empty(args["times"], *mask.shape))
        L = mask.shape[1]
        for b, n in enumerate(mask.sum(1).tolist()):
            real, pad = ys[:, b, :n], ys[:, b, n:]
            if not torch.equal(real.sort(-1).values, torch.arange(n).expand_as(real)):
                if (real >= n).any():
                    return (f"sentence {b}'s real tokens got positions past {n - 1}: padding must keep its own "
                            f"positions (n, n+1, ...), and the real tokens take 0..{n - 1}")
                return f"sentence {b}'s real tokens must get the positions 0..{n - 1}, each once"
            if not torch.equal(pad, torch.arange(n, L).expand_as(pad)):
                return "padding must keep its own positions (n, n+1, ...)"
        if same_every_call(ys):
            return "every call gives the same order: draw afresh on each call"
        if uniform:
            n = int(mask.sum(1)[0])
            where = F.one_hot(ys[:, 0, :n].long(), n).sum(0).double()  # (position, new position): counts
            if uneven(where, args["times"] / n):
                return "some positions go to some places far more often: the order must be a uniform permutation"
            rotations = all(((ys[i, 0, 1:n] - ys[i, 0, : n - 1]) % n == 1).all() for i in range(len(ys)))
            if rotations:
                return "each order is a rotation: the shuffle must be a uniform permutation"
        return None
    return check


def check_span(uniform: bool = False) -> Callable:
    def check(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
        args, t = inputs
        mask, rate = t["attention_mask"], args["rate"]
        ys = tensor(answer, "y", torch.empty(args["times"], *mask.shape))
        if (ys.bool() & (mask == 0)).any():
            return "the span reaches padding: keep real tokens only"
        starts = []
        for b, n in enumerate(mask.sum(1).tolist()):
            keep = max(int(n * (1 - rate)), 1)
            rows = ys[:, b, :n].bool()
            if not (rows.sum(-1) == keep).all():
                return f"it keeps {rows.sum(-1)[0].item()} of {n} real tokens: " \
                       f"keep max(int(n * (1 - rate)), 1) = {keep}"
            first = rows.int().argmax(-1)
            span = (torch.arange(n)[None, :] >= first[:, None]) & (torch.arange(n)[None, :] < (first + keep)[:, None])
            if not torch.equal(rows, span):
                return "the kept tokens are not one contiguous run"
            starts.append((first, n - keep + 1))
        if all(len(set(first.tolist())) < 2 for first, _ in starts):
            return "the span always starts at the same place: draw its start at random"
        if uniform:
            first, choices = starts[0]
            counts = torch.bincount(first, minlength=choices).double()
            if len(counts) > choices or uneven(counts, float(counts.mean())):
                return "some starts come far more often: every start from 0 to n - keep must be equally likely"
        return None
    return check


# ---------------------------------------------------------------------------------------------------------------
# Exercise 8: NT-Xent. Expected: the reference's outputs; causes from behaviour (symmetry, scale) and wrong formulas


def nt_xent_inputs(seed: int, zero_row: bool = False) -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        g = gen(seed)
        z1, z2 = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
        if zero_row:
            z1[2] = 0.0
        same = torch.eye(4, dtype=torch.bool)
        same[0, 3] = same[3, 0] = True  # sentences 0 and 3 are one sentence twice
        big1, big2 = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
        calls = [{"z1": "z1", "z2": "z2", "temperature": 0.1, "grad": True},
                 {"z1": "z2", "z2": "z1", "temperature": 0.1},
                 {"z1": "z1x3", "z2": "z2", "temperature": 0.1},
                 {"z1": "z1", "z2": "z2", "temperature": 0.1, "same": "same", "grad": True},
                 {"z1": "z1", "z2": "z1", "temperature": 0.1},
                 {"z1": "big1", "z2": "big2", "temperature": 0.1}]
        return {"calls": calls}, {"z1": z1, "z2": z2, "z1x3": 3 * z1, "same": same, "big1": big1, "big2": big2}
    return make


def check_nt_xent(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    _, t = inputs
    loss = tensor(answer, "0/loss").double()
    want = expected.tensors["0/loss"].double()
    if not loss.isfinite().all() and want.isfinite().all():
        if (t["z1"].norm(dim=-1) == 0).any():
            return ("NaN on a zero vector: normalise with F.normalize (it keeps the norm away from 0), not by dividing "
                    "by norm()")
        return "NaN or inf: the -inf of a left-out candidate must never be multiplied by 0 (use masked_fill, "\
               "cross_entropy or logsumexp)"
    if differs(loss, want, atol=1e-4) is None:
        same_loss = tensor(answer, "3/loss").double()
        if differs(same_loss, expected.tensors["3/loss"].double(), atol=1e-4):
            return "with a copy of a sentence in the batch (same[i, j]), the copies must not be candidates of each "\
                   "other; the item's own other view stays the positive"
        for name in ("0/grad_z1", "0/grad_z2"):
            if name not in answer.tensors:
                return "no gradient: the loss is cut from z1 and z2 (.detach(), .item(), torch.tensor(...) or numpy)"
            grad = tensor(answer, name)
            if grad.abs().max() == 0:
                return "no gradient: the loss is cut from z1 and z2 (.detach(), .item(), torch.tensor(...) or numpy)"
            if differs(grad, expected.tensors[name], atol=1e-4):
                return f"the loss is right but its gradient is not ({name[2:]}): keep it one graph from z1 and z2"
        calls = answer.values.get("calls", [])
        if len(calls) == 6 and calls[5] > calls[0]:
            return f"a Python loop over the items: {calls[0]} PyTorch calls for 4 sentences, {calls[5]} for 16; use "\
                   "one matrix product"
        return None
    z1, z2, temperature = t["z1"].double(), t["z2"].double(), 0.1
    u1, u2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    one_way = F.cross_entropy(u1 @ u2.T / temperature, torch.arange(len(z1)))
    both_ways = one_way + F.cross_entropy(u2 @ u1.T / temperature, torch.arange(len(z1)))
    cause = first_cause(loss, [
        ("only the other view's rows are candidates: the same view's other rows are negatives too (2N - 1 candidates)",
         one_way), ("only the other view's rows are candidates: the same view's other rows are negatives too "
                    "(2N - 1 candidates)", both_ways), ("the two views' means are averaged, not summed", want / 2)])
    if cause is None and differs(tensor(answer, "2/loss").double(), loss, atol=1e-4):
        cause = "z1 and z2 are not normalised to unit length: sim is the cosine over the temperature"
    elif cause is None and differs(tensor(answer, "1/loss").double(), loss, atol=1e-4):
        cause = "swapping z1 and z2 changes the loss: both views' rows must be anchors, each with its own positive"
    elif cause is None and float(tensor(answer, "4/loss")) > float(loss):
        cause = "identical views score worse than different ones: item k's positive is its OTHER view, k + N or k - N"
    elif cause is None and float(loss) < 0.2 * float(want):
        cause = ("the loss is far below NT-Xent's: is item k its own positive? "
                 "Its positive is its OTHER view, k + N or "
                 "k - N, and the item itself is no candidate")
    elif cause is None and not (loss > 0):
        cause = "the item itself must be left out of its candidates (its self-similarity is the largest)"
    return f"{cause or 'it is not NT-Xent over the 2N items'}: loss {float(loss):.6g}, expected {float(want):.6g}"


# ---------------------------------------------------------------------------------------------------------------
# Exercise 9: ranking metrics. Expected: small lists worked out by hand (their AP checked against scikit-learn's in
# tests/test_assignments.py)

QUERIES = [([False, True, False, True], {"map": 0.5, "p@1": 0.0, "p@5": 0.4, "mrr": 0.5}),
           ([True, False, True], {"map": (1 + 2 / 3) / 2, "p@1": 1.0, "p@5": 0.4, "mrr": 1.0}),
           ([False, False, False, False, False, False, True], {"map": 1 / 7, "p@1": 0.0, "p@5": 0.0, "mrr": 1 / 7})]
# (labels, scores, AP): AP = sum over the distinct scores, high to low, of (recall gained) * (precision there)
AP_CASES = [([1, 0, 1, 0, 0, 1], [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], (1 / 1 + 2 / 3 + 3 / 6) / 3),
            # ties: one cut-off per distinct score: 0.9 -> recall 1/3 at precision 1; 0.5 -> recall 1 at 3/4
            ([0, 1, 1, 0, 1, 0], [0.5, 0.5, 0.5, 0.2, 0.9, 0.2], 1 / 3 * 1 + 2 / 3 * 3 / 4)]


def metrics_inputs(queries: list, ap: list) -> Callable[[], tuple[dict, Tensors]]:
    return lambda: ({"queries": [q for q, _ in queries], "ap": [(labels, scores) for labels, scores, _ in ap]}, {})


def check_metrics(queries: list, ap: list) -> Callable:
    def check(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
        got = answer.values.get("queries", [])
        for (relevant, want), metrics in zip(queries, got):
            for name, value in want.items():
                if not isinstance(metrics, dict) or not math.isclose(float(metrics.get(name, math.nan)), value,
                                                                     abs_tol=1e-9):
                    value_got = metrics.get(name) if isinstance(metrics, dict) else metrics
                    hint = {"p@5": " (P@5 divides by 5, even for a list shorter than 5)",
                            "map": " (AP: the mean of the precisions at the positives' ranks)",
                            "mrr": " (1 / the rank of the first positive, ranks from 1)",
                            "p@1": " (is the first candidate a positive?)"}[name]
                    return f"{name} of {relevant}: {value_got}, expected {value:.6g}{hint}"
        for (labels, scores, want), value in zip(ap, answer.values.get("ap", [])):
            if not math.isclose(value, want, abs_tol=1e-9):
                tied = len(set(scores)) < len(scores)
                hint = " (tied scores form one cut-off: take the whole group of equal scores at once)" if tied else ""
                return f"average_precision({labels}, {scores}) = {value:.6g}, expected {want:.6g}{hint}"
        if len(got) != len(queries) or len(answer.values.get("ap", [])) != len(ap):
            return "some results are missing"
        return None
    return check


# ---------------------------------------------------------------------------------------------------------------
# Exercise 11: safetensors. Expected: the tensors the judge wrote (with the safetensors package or by hand)


def safetensors_files(files: list[bytes]) -> Callable[[], tuple[dict, Tensors]]:
    return lambda: ({"files": len(files)}, {f"file{i}": torch.frombuffer(bytearray(b), dtype=torch.uint8)
                                            for i, b in enumerate(files)})


def saved(tensors: Tensors) -> bytes:
    from safetensors.torch import save

    return save(tensors)


def by_hand(tensors: Tensors, order: list[str]) -> bytes:
    """A safetensors file whose tensors' bytes lie in `order`, whatever order the header lists them in."""
    import json
    import struct

    names = {"F32": torch.float32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16}
    dtype_name = {v: k for k, v in names.items()}
    header, body = {}, b""
    for name in order:
        data = tensors[name].contiguous().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": dtype_name[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    text = json.dumps(dict(sorted(header.items()))).encode()
    return struct.pack("<Q", len(text)) + text + body


def check_safetensors(wanted: list[Tensors | None]) -> Callable:
    def check(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
        files = answer.values.get("files", [])
        if len(files) != len(wanted):
            return "some files were not read"
        for i, (want, got) in enumerate(zip(wanted, files)):
            if want is None:
                if "raised" not in got:
                    return "a file cut short (or whose header length runs past its end) must be refused with an error"
                continue
            if "raised" in got:
                return f"a valid file was refused ({got['raised']}): " \
                       f"check the dtypes (F32, F16, BF16, I64) and the offsets"
            if sorted(want) != got.get("names"):
                return f"the tensors' names: {got.get('names')}, expected {sorted(want)} (__metadata__ is no tensor)"
            for name, t in want.items():
                mine = answer.tensors.get(f"{i}/{name}")
                if mine is None or mine.dtype != t.dtype or tuple(mine.shape) != tuple(t.shape):
                    return f"tensor {name}: dtype or shape differs (expected {t.dtype} {tuple(t.shape)})"
                if not torch.equal(mine, t):
                    return (f"tensor {name}: its values differ: data_offsets count from the end of the header, and "
                            f"each tensor's bytes are where ITS offsets say (not in the header's order)")
        return None
    return check


# ---------------------------------------------------------------------------------------------------------------
# Exercises 4, 5, 12: modules. Expected: the reference's outputs on the same random modules and inputs


def decoder_inputs(seed: int, with_changes: bool = False) -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        g = gen(seed)
        x, memory = torch.randn(2, 5, 16, generator=g), torch.randn(2, 1, 16, generator=g)
        t = {"x": x, "memory": memory, "causal": torch.ones(5, 5, dtype=torch.bool).tril(),
             "grad": torch.randn(2, 5, 16, generator=g)}
        if with_changes:
            changed = x.clone()
            changed[:, -1] = torch.randn(2, 16, generator=g)
            t |= {"x_changed": changed, "memory_changed": torch.randn(2, 1, 16, generator=g)}
        return {"seed": seed}, t
    return make


def check_decoder(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    ev = tensor(answer, "eval", expected.tensors["eval"])
    if ev.isnan().any():
        return ("NaN: give the self-attention the causal mask as it is (True where t' <= t), not inverted (inverted, "
                "the last position would see nothing)")
    if "eval_x_changed" in answer.tensors:  # the student's own outputs, two inputs that differ at the last position
        seen = tensor(answer, "eval_x_changed", ev)
        if not torch.allclose(seen[:, :-1], ev[:, :-1], atol=1e-6):
            return ("a position sees a later token: give the self-attention the causal mask as it is (True where "
                    "t' <= t), not inverted, not left out; the cross-attention reads memory only, never x")
        if torch.allclose(tensor(answer, "eval_memory_changed", ev), ev, atol=1e-6):
            return "the output does not depend on memory: the cross-attention reads memory (keys and values)"
    gap = differs(ev, expected.tensors["eval"])
    if gap:
        if close_to(ev, inputs[1]["x"]):
            return f"it returns x as it is: three blocks, each x = LN(x + dropout(block(x))) ({gap})"
        return ("in eval mode it is not the three post-norm blocks x = LN(x + dropout(block(x))): causal "
                f"self-attention with self_attn_norm, cross-attention to memory with cross_attn_norm, the "
                f"feed-forward with ffn_norm ({gap})")
    gap = differs(tensor(answer, "train", expected.tensors["train"]), expected.tensors["train"])
    if gap:
        return ("in training mode the dropout differs: self.dropout acts on each block's output, "
                "before the residual is "
                f"added, once per block in the order self-attention, cross-attention, feed-forward ({gap})")
    for name, want in expected.tensors.items():
        if name.startswith("grad/") and differs(tensor(answer, name, want), want, atol=1e-4):
            return f"the gradient of {name[5:]} differs: keep the layer one graph (no .detach(), no in-place edits)"
    return None


def tsdae_inputs(seed: int, normalisation: str = "tokens") -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        g = gen(seed)
        lengths, vocab = [7, 4, 6], 30
        original = torch.zeros(3, 7, dtype=torch.long)
        omask = torch.zeros(3, 7, dtype=torch.long)
        damaged, dmask = torch.zeros(3, 5, dtype=torch.long), torch.zeros(3, 5, dtype=torch.long)
        for b, n in enumerate(lengths):
            ids = torch.randint(3, vocab, (n,), generator=g)
            ids[0], ids[-1] = 1, 2  # [CLS] ... [SEP]
            original[b, :n], omask[b, :n] = ids, 1
            kept = ids[[0, *range(1, n - 1, 2), n - 1]][:5]
            damaged[b, : len(kept)], dmask[b, : len(kept)] = kept, 1
        return {"seed": seed, "vocab": vocab, "normalisation": normalisation}, {
            "damaged_ids": damaged, "damaged_mask": dmask, "original_ids": original, "original_mask": omask}
    return make


def check_tsdae(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    loss, want = tensor(answer, "loss").double(), expected.tensors["loss"].double()
    if not loss.isfinite().all():
        return "NaN or inf: padding labels must be left out of the cross-entropy, not given -inf"
    if differs(loss, want, atol=1e-5):
        n = inputs[1]["original_mask"][:, 1:].sum()
        if math.isclose(float(loss) * float(n), float(want) * len(inputs[1]["original_ids"]), rel_tol=1e-5) or \
                math.isclose(float(loss), float(want) * float(n), rel_tol=1e-5):
            return (f"the loss is scaled wrongly: {float(loss):.6g}, expected {float(want):.6g}: divide the summed "
                    f"negative log-likelihood by self.count(batch) with self.global_mean")
        return (f"the loss {float(loss):.6g}, expected {float(want):.6g}: encode the DAMAGED sentence (self.memory), "
                "feed the original without its last token, predict the original shifted by one, over the real (non-pad)"
                " label tokens only")
    for name, g in expected.tensors.items():
        if name.startswith("grad/") and name not in answer.tensors:
            return "no gradient: the loss is cut from the model's parameters (.detach(), .item() or torch.tensor)"
        if name.startswith("grad/") and differs(tensor(answer, name, g), g, atol=1e-5):
            return f"the loss is right but its gradient is not ({name[5:]}): keep it one graph (no .detach())"
    return None


def chunk_inputs(seed: int) -> Callable[[], tuple[dict, Tensors]]:
    def make() -> tuple[dict, Tensors]:
        g = gen(seed)
        ids = torch.randint(3, 50, (6, 7), generator=g)
        mask = torch.ones(6, 7, dtype=torch.long)
        for b, n in enumerate([7, 5, 6, 3, 7, 4]):
            mask[b, n:], ids[b, n:] = 0, 0
        return {"seed": seed, "chunk": 2}, {"input_ids": ids, "attention_mask": mask,
                                             "grad": torch.randn(6, 16, generator=g)}
    return make


def check_chunks(answer: Answer, inputs: tuple[dict, Tensors], expected: Answer | None) -> str | None:
    grads = {n: g for n, g in expected.tensors.items() if n.startswith("grad/")}
    if all(tensor(answer, n).abs().max() == 0 for n in grads):
        return "no gradient reached the parameters: back-propagate each chunk's vectors with its rows of grad"
    wrong = [n for n, g in grads.items() if differs(tensor(answer, n, g), g, atol=1e-5)]
    if wrong:
        return ("the gradient is not the whole batch's: encode each chunk again from the random state it started from "
                "(set it from `states` before each chunk's encode), and back-propagate that chunk's rows of grad "
                f"({len(wrong)} of {len(grads)} parameters differ)")
    if not answer.values.get("random_state_kept"):
        return "the run's random state changed: put it back as you found it (torch.random.fork_rng)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# The public cases (the held-back ones: course/held_back.py, with the judge only)


def public_cases() -> list[Case]:
    tensors = {"f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 7,
               "f16": torch.linspace(-2, 2, 5).half(), "bf16": torch.linspace(-3, 3, 4).bfloat16(),
               "i64": torch.tensor([[1, -2], [3, 2**40]], dtype=torch.int64)}
    cut = saved({"w": torch.ones(3, 4)})
    return [
        Case(1, "a padding mask", "attention", attention_inputs(1, mask="padding"), check_attention),
        Case(1, "a causal mask, the outputs being the probabilities themselves (v = I)", "attention",
             attention_inputs(2, mask="causal", identity_v=True), check_attention),
        Case(1, "a float mask: a position bias added to the scores, -inf where a query may not attend", "attention",
             attention_inputs(3, mask="float"), check_attention),
        Case(2, "cls, mean and max pooling, with padding that would show", "pool", pool_inputs(1), check_pool,
             reference=True),
        Case(3, "60% of the words deleted, each on its own, in order; an empty sentence stays empty", "delete_words",
             deletion_inputs(1, 0.6, 800, 10, runs=2, extra=[[]]), check_deletion(0.6, 0.02)),
        Case(3, "when every word is deleted, one drawn at random survives", "delete_words",
             deletion_inputs(2, 1.0, 60, 5, extra=[[]]), check_deletion_of_everything),
        Case(4, "the three post-norm blocks: outputs and gradients, eval and training mode; no position sees a later "
                "token", "decoder_layer", decoder_inputs(1, with_changes=True), check_decoder, reference=True),
        Case(5, "the reconstruction loss and its gradients", "tsdae_loss", tsdae_inputs(1), check_tsdae,
             reference=True),
        Case(6, "token cutoff: int(n * rate) whole real-token rows", "cutoffs",
             view_inputs(1, 20, "token_cutoff", 0.3), check_cutoff("token")),
        Case(6, "feature cutoff: int(d * rate) whole columns per sentence", "cutoffs",
             view_inputs(2, 20, "feature_cutoff", 0.25), check_cutoff("feature")),
        Case(7, "each sentence's real positions permuted, padding kept", "shuffle", view_inputs(1, 20),
             check_shuffle()),
        Case(8, "NT-Xent, its gradient and a sentence twice in the batch", "nt_xent", nt_xent_inputs(1), check_nt_xent,
             reference=True),
        Case(8, "NT-Xent with a zero vector among the views (a number, not NaN)", "nt_xent",
             nt_xent_inputs(2, zero_row=True), check_nt_xent, reference=True),
        Case(9, "AP, P@1, P@5 and MRR of ranked lists; average precision with ties", "metrics",
             metrics_inputs(QUERIES[:2], AP_CASES), check_metrics(QUERIES[:2], AP_CASES)),
        Case(10, "one contiguous span of max(int(n * (1 - rate)), 1) real tokens", "span", view_inputs(1, 30, rate=0.3),
             check_span()),
        Case(11, "every dtype read back, and a file cut short refused", "read_safetensors",
             safetensors_files([saved(tensors), cut[:-5]]), check_safetensors([tensors, None])),
        Case(12, "the cached gradient equals the whole batch's, the random state kept", "backward_in_chunks",
             chunk_inputs(1), check_chunks, reference=True),
    ]


# ---------------------------------------------------------------------------------------------------------------
# Expected values from the reference


_REFERENCE_ANSWERS: dict[str, Answer] = {}  # the reference's answers computed in this process, by case


class Expected:
    """The reference's outputs of each case that needs them: from course/expected.frame, or computed in a worker on
    this repository when it holds the reference (trusted code: it runs as the judge's own user)."""

    def __init__(self, root: Path = ROOT):
        self.root, self.answers = root, {}
        path = root / EXPECTED_FILE
        if path.is_file():
            values, tensors = channel.decode(path.read_bytes())
            for key, answer_values in values.items():
                prefix = key + "::"
                self.answers[key] = Answer("answered", answer_values,
                                           {n[len(prefix):]: t for n, t in tensors.items() if n.startswith(prefix)})

    def of(self, case: Case) -> Answer | None:
        return self.answers.get(case.key)

    def compute(self, cases: list[Case]) -> None:
        """The reference's answers to every case that needs one and has none yet, in one worker on this repository
        (where an exercise is blank its answers say "not written", and its cases do not run)."""
        missing = [case for case in cases if case.reference and case.key not in self.answers]
        if self.root == ROOT:
            self.answers |= {case.key: _REFERENCE_ANSWERS[case.key] for case in missing
                             if case.key in _REFERENCE_ANSWERS}
            missing = [case for case in missing if case.key not in _REFERENCE_ANSWERS]
        if missing:
            answers = run_worker(self.root, [(case.probe, *case.inputs()) for case in missing])
            self.answers |= {case.key: answer for case, answer in zip(missing, answers)}
            if self.root == ROOT:
                _REFERENCE_ANSWERS.update({case.key: answer for case, answer in zip(missing, answers)
                                           if answer.outcome == "answered"})


def write_expected(out: Path, cases: list[Case]) -> None:
    """course/expected.frame for a copy: the reference's outputs of each case that needs them."""
    expected, values, tensors = Expected(ROOT), {}, {}
    expected.compute(cases)
    for case in cases:
        if case.reference:
            answer = expected.of(case)
            if answer is None or answer.outcome != "answered":
                raise SystemExit(f"error: the reference failed case {case.key}: {answer and answer.message}")
            values[case.key] = answer.values
            tensors |= {f"{case.key}::{n}": t for n, t in answer.tensors.items()}
    out.write_bytes(channel.encode(values, tensors))


# ---------------------------------------------------------------------------------------------------------------
# Judging


# An error a function raised, and its likely cause: (probe, words in the error, the cause in the student's words)
ERROR_CAUSES = [
    ("delete_words", "empty sequence", "an empty sentence must stay empty (rng.choice of an empty list fails)"),
    ("attention", "must match the size", "the shapes do not fit: scores are (B, h, Lq, Lk), q @ k.transpose(-2, -1)"),
    ("read_safetensors", "offset", "data_offsets count from the end of the header (8 + its length)"),
]


def decide(case: Case, inputs: tuple[dict, Tensors], answer: Answer, want: Answer | None) -> Result:
    """One case's result, decided here from the worker's answer."""
    if case.reference and (want is None or want.outcome != "answered"):
        return Result(case, "did not run", "this copy holds no expected values for it (course/expected.frame)")
    if answer.outcome != "answered":
        cause = next((cause for probe, words, cause in ERROR_CAUSES
                      if probe == case.probe and words in answer.message), None)
        return Result(case, answer.outcome, f"{cause}: {answer.message}" if cause else answer.message)
    try:
        problem = case.check(answer, inputs, want)
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError, AttributeError) as e:
        problem = f"its outputs are not what the exercise returns: " \
                  f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
    return Result(case, FAILED if problem else PASSED, problem or "")


def judge(numbers: list[int], root: Path, cases: list[Case], user: str | None = None,
          expected: Expected | None = None, timeout: float = WORKER_TIMEOUT) -> dict[int, list[Result]]:
    """{exercise: the result of each of its cases}: the cases of each exercise in a worker of its own in `root`."""
    expected = expected or Expected(ROOT)
    cases = [case for case in cases if case.number in numbers]
    expected.compute(cases)
    results = {}
    for number in numbers:
        mine = [case for case in cases if case.number == number]
        inputs = [case.inputs() for case in mine]
        answers = run_worker(root, [(case.probe, *i) for case, i in zip(mine, inputs)], user, timeout) if mine else []
        results[number] = [decide(case, i, answer, expected.of(case)) for case, i, answer in zip(mine, inputs, answers)]
    return results


def worker_copy(out: Path, files: list[str], source: Path = ROOT) -> None:
    """The files a worker needs, copied from `source` into `out`: the repository without the judge's own (tests/,
    the held-back cases, the expected values), so that nothing of theirs is within the student's code's reach."""
    for name in files:
        if name.startswith("tests/") or name in ("course/held_back.py", EXPECTED_FILE):
            continue
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, out / name)

