"""The process the student's code runs in, started by the judge (course/judge.py) for one call of one probe.

    python -I course/worker.py        # stdin: a request frame (course/channel.py); stdout: the answer frame

It reads the request (the calls to make: each a probe's name and the inputs the judge generated for it), runs each
probe (course/probes.py: it calls the student's function and gathers what that function returned), and writes one
answer frame, the answers in the calls' order. Nothing else leaves:
the student's own prints go to stderr, which the judge keeps to a few lines. This process decides nothing: the judge
reads the answer, checks its format and compares the values itself. It holds no expected value and no test.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def first_line(error: BaseException) -> str:
    """The error as a student reads it: its type and the first line of its message, at most 300 characters."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:300] if text else type(error).__name__


def main() -> None:
    answer = os.fdopen(os.dup(1), "wb")  # the judge's channel: a descriptor of its own
    os.dup2(2, 1)  # print() of the student's code goes to stderr, never into the answer
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    from course import channel, probes

    request, inputs = channel.decode(sys.stdin.buffer.read(channel.LIMIT + 1))
    answers, outputs = [], {}
    for i, call in enumerate(request["calls"]):
        prefix = f"{i}::"
        tensors = {name[len(prefix):]: t for name, t in inputs.items() if name.startswith(prefix)}
        try:
            values, out = probes.PROBES[call["probe"]](call["args"], tensors)
            answers.append({"ok": True, "values": values})
            outputs |= {prefix + name: t for name, t in out.items()}
        except NotImplementedError as e:
            answers.append({"ok": False, "error": first_line(e), "not_written": True})
        except BaseException as e:  # noqa: BLE001 - whatever the student's code raised, the judge gets one line
            answers.append({"ok": False, "error": first_line(e)})
    frame = channel.encode({"answers": answers}, outputs)
    answer.write(frame)
    answer.flush()


if __name__ == "__main__":
    main()
