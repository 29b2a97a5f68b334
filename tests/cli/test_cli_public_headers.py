"""test_cli_public_headers.py - the `dilattn` command line is a user program: tools/ includes only
the library's public headers (lib/dilattn.h, dilattn_mask.h, dilattn_pool.h, dilattn_ring.h),
its own headers and system headers, never an internal header such as index_rules.h.
Run by meson (`meson test -C build --suite cli`) with DILATTN_TOOLS_DIR set to tools/.
"""
import os
import re

import pytest

TOOLS = os.environ.get("DILATTN_TOOLS_DIR", "")
PUBLIC = {"dilattn.h", "dilattn_mask.h", "dilattn_pool.h", "dilattn_ring.h"}


def test_tools_include_only_public_library_headers():
    if not TOOLS:
        pytest.fail("DILATTN_TOOLS_DIR is not set (run through meson test)")
    own = {f for f in os.listdir(TOOLS) if f.endswith(".h")}
    sources = [f for f in os.listdir(TOOLS) if f.endswith((".h", ".cpp"))]
    assert len(sources) > 10
    for source in sources:
        text = open(os.path.join(TOOLS, source), encoding="utf-8").read()
        for quoted in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
            assert quoted in own or quoted in PUBLIC, f"tools/{source} includes \"{quoted}\""
        for angled in re.findall(r'^\s*#\s*include\s*<([^>]+)>', text, re.M):
            assert not angled.startswith("dilattn") or angled in PUBLIC, (source, angled)
