"""Reading Bazel's build event files (--build_event_json_file) for //tools:regen_cache: the
dumps' test statuses and log directories after `bazel test`, and the target patterns a
`bazel query --keep_going` skipped. Structured output, so that no error text is parsed.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path


def normalize_label(label: str) -> str:
    """Drops the main-repository prefix ("@//", "@@//") that Bazel prints in some versions."""
    for prefix in ("@@//", "@//"):
        if label.startswith(prefix):
            return label[len(prefix) - 2 :]
    return label


def bep_events(bep_json: Path) -> list[dict]:
    """The events of a --build_event_json_file (one JSON object per line); [] if absent."""
    if not bep_json.is_file():
        return []
    events = []
    for line in bep_json.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def read_test_statuses(bep_json: Path) -> dict[str, str]:
    """Per-label overall status ("PASSED", "FAILED", ...) from a --build_event_json_file."""
    statuses: dict[str, str] = {}
    for event in bep_events(bep_json):
        summary_id = event.get("id", {}).get("testSummary")
        if summary_id and "testSummary" in event:
            label = normalize_label(summary_id.get("label", ""))
            statuses[label] = event["testSummary"].get("overallStatus", "UNKNOWN")
    return statuses


def read_test_dirs(bep_json: Path) -> dict[str, Path]:
    """Per-label bazel-testlogs directory, taken from the test.log URI in the build events.

    More robust than `bazel info bazel-testlogs`, which would need the same configuration
    flags as the test run (and `info` rejects test-only flags).
    """
    directories: dict[str, Path] = {}
    for event in bep_events(bep_json):
        result_id = event.get("id", {}).get("testResult")
        if not result_id or "testResult" not in event:
            continue
        for output in event["testResult"].get("testActionOutput", []):
            uri = output.get("uri", "")
            if output.get("name") == "test.log" and uri.startswith("file://"):
                log = Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
                directories[normalize_label(result_id.get("label", ""))] = log.parent
    return directories


def skipped_patterns(events: list[dict]) -> tuple[tuple[str, str], ...]:
    """(pattern, Bazel's reason) for every target pattern a `--keep_going` command skipped
    (its `patternSkipped` events: "no targets found beneath 'tema'", "no such target ...")."""
    found: dict[str, str] = {}
    for event in events:
        for pattern in event.get("id", {}).get("patternSkipped", {}).get("pattern", []):
            found.setdefault(pattern, event.get("aborted", {}).get("description", "").strip())
    return tuple(sorted(found.items()))
