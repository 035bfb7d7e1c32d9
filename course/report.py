"""The pytest plugin `grade` loads (-p course.report): one JSON line per test into the file $ASSIGNMENTS_REPORT, as
soon as the test starts and again when it ends, so that the grader knows which test was running when the test
process died (os._exit, a crash, being killed), and has every failure's message whole (pytest's own junit report
cuts its message attribute at 500 characters)."""
from __future__ import annotations

import json
import os
import re

import pytest


def write(line: dict) -> None:
    with open(os.environ["ASSIGNMENTS_REPORT"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def message(report: pytest.TestReport) -> str:
    """What went wrong, whole: the exception's own message (an assertion's text), else pytest's report."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2]  # (file, line, "Skipped: why")
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else str(report.longrepr)


def pytest_runtest_logstart(nodeid: str, location) -> None:
    if os.environ.get("ASSIGNMENTS_REPORT"):
        write({"test": nodeid, "event": "started"})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not os.environ.get("ASSIGNMENTS_REPORT"):
        return
    if report.failed or report.skipped or report.when == "call":
        write({"test": report.nodeid, "event": report.when, "outcome": report.outcome,
               "message": None if report.passed else message(report)})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if os.environ.get("ASSIGNMENTS_REPORT") and report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else re.sub(r"^E\s+", "",
                                                              str(report.longrepr).strip().splitlines()[-1])
        write({"test": report.nodeid, "event": "collect", "outcome": "failed", "message": text})
