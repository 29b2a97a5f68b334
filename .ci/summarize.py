#!/usr/bin/env python3
"""Sums meson's test logs of the given build directories, pytest JUnit files (--junit F), cargo
test logs (--cargo-log F) and failed non-meson CI steps into one line, "N passed, N failed", and
exits non-zero when anything failed or nothing ran."""
import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def junit_counts(path):
    """(passed, failed) of a pytest JUnit XML file; skipped tests are reported, not counted."""
    if not Path(path).exists():
        print(f"{path}: no JUnit file (the step did not run its tests)")
        return 0, 1
    passed = failed = 0
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        name = f"{case.get('classname')}::{case.get('name')}"
        if kinds & {"failure", "error"}:
            failed += 1
            print(f"{path}: FAIL: {name}")
        elif "skipped" in kinds:
            print(f"{path}: skipped (not counted as passed): {name}")
        else:
            passed += 1
    return passed, failed


def cargo_counts(path):
    """(passed, failed) summed over the "test result:" lines of a cargo test log."""
    if not Path(path).exists():
        print(f"{path}: no cargo log")
        return 0, 1
    passed = failed = 0
    for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed", Path(path).read_text()):
        passed += int(m.group(1))
        failed += int(m.group(2))
    return passed, failed


def main(argv):
    failed_steps = 0
    dirs, junits, cargo_logs = [], [], []
    args = iter(argv)
    for a in args:
        if a == "--failed-steps":
            failed_steps = int(next(args))
        elif a == "--junit":
            junits.append(next(args))
        elif a == "--cargo-log":
            cargo_logs.append(next(args))
        else:
            dirs.append(a)
    passed = failed = 0
    for counts in [junit_counts(j) for j in junits] + [cargo_counts(c) for c in cargo_logs]:
        passed += counts[0]
        failed += counts[1]
    for d in dirs:
        log = Path(d) / "meson-logs" / "testlog.json"
        if not log.exists():
            print(f"{d}: no test log (build failed?)")
            failed += 1
            continue
        for line in log.read_text().splitlines():
            r = json.loads(line)
            if r["result"] in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r["result"] == "SKIP":
                print(f"{d}: skipped (not counted as passed): {r['name']}")
            else:
                failed += 1
                print(f"{d}: {r['result']}: {r['name']}")
    failed += failed_steps
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
