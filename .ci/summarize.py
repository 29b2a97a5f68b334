#!/usr/bin/env python3
"""Sums meson's test logs of the given build directories (plus failed non-meson CI steps) into
one line, "N passed, N failed", and exits non-zero when anything failed or nothing ran."""
import json
import sys
from pathlib import Path


def main(argv):
    failed_steps = 0
    dirs = []
    args = iter(argv)
    for a in args:
        if a == "--failed-steps":
            failed_steps = int(next(args))
        else:
            dirs.append(a)
    passed = failed = 0
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
