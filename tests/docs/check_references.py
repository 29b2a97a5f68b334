#!/usr/bin/env python3
"""check_references.py - every file path and spec citation the repository's prose names exists.

Reads every file git tracks or would track (git ls-files --cached --others --exclude-standard;
without git, a walk that skips build folders) and reports
each dangling reference as `file:line: what`, exiting 1 if there is any, 0 otherwise:

(a) paths. In comments (C/C++/CUDA and Rust `//` and `/* */`, Python `#` comments and docstrings,
    meson and shell `#` comments) and in markdown files, a token that names a repository path
    must exist: a token with a `/` whose first component is a top-level folder of the repository
    (TOP_FOLDERS), relative to the repository root; or a bare file name with a source extension
    (SOURCE_EXTENSIONS), which must exist somewhere in the tree unless EXTERNAL_NAMES lists it.
    A path that is not found from the root may be relative to a folder above the file (a Rust
    crate's tests/). Markdown links `[text](target#anchor)` resolve relative to the markdown file.
    Skipped: glob-like or placeholder tokens (`*`, `<`, `{`, `$`, a one-letter or all-capitals
    stem such as x.json or KERNEL.cu), build outputs (`build/...`), and an extension-less name
    in an existing folder (a build target such as bench/cpu/cpu_bench).
(b) spec citations. `SPEC N`, `SPEC N.M`, `SPEC N-M`, `docs/spec.md §N`, `docs/spec.md section N`
    and `[docs/spec.md](...) sections N, M and K`, in any text file, name sections that
    docs/spec.md has as headings `## N.` (or `### N.M`).
(c) the spec's name. The specification is docs/spec.md; any other spelling of its file name in
    upper case (see SPEC_FILE_WRONG_NAME) is reported.
(d) README sections. `README "<title>"` (also `README, "<title>"`, `README ("<title>")` and
    `emu/README.md, "<title>"`), in any text file, names a heading of that README.

Needs Python 3 only (no build, no third-party module); about a second of CPU time.
Usage: check_references.py [--root DIR]
"""

import argparse
import ast
import io
import os
import re
import subprocess
import sys
import tokenize

# The top-level folders of the repository: a token whose first component is one of these is a
# repository path. `build` is not one of them: build outputs are skipped.
TOP_FOLDERS = {"lib", "cpu", "cpu_ref", "cuda", "emu", "tools", "tests", "bench", "examples",
               "python", "rust", "docs", ".ci"}

# A bare file name (no `/`) with one of these extensions must be the name of a tracked file.
SOURCE_EXTENSIONS = {".h", ".cuh", ".cu", ".cpp", ".c", ".py", ".rs", ".md", ".sh", ".build"}

# Bare names that are not files of this repository, each with the reason it is named.
EXTERNAL_NAMES = {
    "cuda_fp16.h": "CUDA toolkit header (half type)",
    "cuda_bf16.h": "CUDA toolkit header (bfloat16 type)",
    "cuda_runtime.h": "CUDA toolkit header (runtime API)",
    "cuda_runtime_api.h": "CUDA toolkit header (runtime API)",
    "cuda.h": "CUDA toolkit header (driver API)",
    "mma.h": "CUDA toolkit header (WMMA)",
    "nccl.h": "NCCL's header",
    "mpi.h": "MPI's header",
    "immintrin.h": "the compiler's x86 intrinsics header",
    "arm_neon.h": "the compiler's NEON intrinsics header",
    "dlfcn.h": "POSIX header (dlopen)",
    "pthread.h": "POSIX header (threads)",
    "unistd.h": "POSIX header",
    "Python.h": "CPython's C API header",
    "conftest.py": "pytest's per-folder configuration file name, in general",
    "setup.py": "setuptools' build script name, which this project does not use",
    "mod.rs": "Rust's module file name convention",
    "main.rs": "Rust's binary crate root name",
    "build.rs": "Cargo's build script name",
}

# The specification's file name written in upper case: the specification is docs/spec.md.
SPEC_FILE_WRONG_NAME = "SPEC" + ".md"

C_LIKE = {".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".rs"}
HASH_COMMENT = {".build", ".options", ".sh", ".toml", ".jl", ".cfg", ".txt_comment"}
SKIP_DIRS = {".git", "build", "target", "__pycache__", ".venv", "node_modules"}

# "SPEC N", "SPEC N.M", "SPEC N-M"; "docs/spec.md §N", "docs/spec.md section N",
# "[docs/spec.md](docs/spec.md) sections N, M and K" (each number checked).
SPEC_CITATION = re.compile(
    r"\bSPEC (?P<spec>\d+(?:\.\d+)?(?:\s*(?:-|\.\.|–)\s*\d+(?:\.\d+)?)?)"
    r"|spec\.md(?:\]\([^)\s]*\))?\)?\s*(?:§\s*|sections?\s+)"
    r"(?P<doc>\d+(?:\.\d+)?(?:\s*(?:,|-|–|\band\b|\bor\b)\s*\d+(?:\.\d+)?)*)")
SECTION_NUMBER = re.compile(r"(\d+)(?:\.(\d+))?")
TOKEN = re.compile(r"[^\s`'\"()\[\],;|]+")
MD_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
LINE_SUFFIX = re.compile(r"(?::\d+)+$")
README_SECTION = re.compile(r"((?:[\w.-]+/)*README(?:\.md)?),?\s*\(?\"([^\"<]+)\"")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True,
                             capture_output=True).stdout.decode("utf-8", "replace")
        names = [n for n in out.split("\0") if n]
        if names:
            return sorted(n for n in names if os.path.isfile(os.path.join(root, n)))
    except (OSError, subprocess.CalledProcessError):
        pass
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.startswith("build")]
        for f in filenames:
            names.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return sorted(names)


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


C_LEXEME = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^\\'\n])'",
                      re.DOTALL)


def mask_c_like(text):
    """The text with everything but `//` and `/* */` comments blanked (line breaks kept). String
    and character literals are skipped whole; a Rust lifetime ('a) is not a character literal."""
    out, pos = [], 0
    for m in C_LEXEME.finditer(text):
        out.append("\n" * text.count("\n", pos, m.start()))
        lexeme = m.group(0)
        out.append(lexeme if lexeme[0] == "/" else "\n" * lexeme.count("\n"))
        pos = m.end()
    out.append("\n" * text.count("\n", pos))
    return "".join(out)


def mask_python(text):
    """The text with everything but `#` comments and docstrings blanked (newlines kept)."""
    lines = text.split("\n")
    keep = [[" "] * len(l) for l in lines]

    def copy(srow, scol, erow, ecol):   # 1-based rows, 0-based columns, end exclusive
        for r in range(srow, erow + 1):
            line = lines[r - 1]
            a = scol if r == srow else 0
            b = ecol if r == erow else len(line)
            keep[r - 1][a:b] = line[a:b]

    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                copy(tok.start[0], tok.start[1], tok.end[0], tok.end[1])
        tree = ast.parse(text)
    except (SyntaxError, tokenize.TokenError, ValueError):
        return "\n".join(l if l.lstrip().startswith("#") else "" for l in lines)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                d = body[0].value
                copy(d.lineno, d.col_offset, d.end_lineno, d.end_col_offset)
    return "\n".join("".join(k) for k in keep)


def mask_hash(text):
    """Lines of `#` comments (meson, shell, TOML, Julia): the comment part, outside quotes."""
    out = []
    for line in text.split("\n"):
        quote, kept = None, ""
        for i, c in enumerate(line):
            if quote:
                if c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c == "#" and not line.startswith("#!"):
                kept = " " * i + line[i:]
                break
        out.append(kept)
    return "\n".join(out)


def is_shell_script(text):
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and ("sh" in first.split("/")[-1] or "bash" in first)


def prose_of(name, text):
    """The part of a file whose paths are checked, as text with the file's line structure."""
    ext = os.path.splitext(name)[1]
    if ext == ".md":
        return text
    if ext in C_LIKE:
        return mask_c_like(text)
    if ext == ".py":
        return mask_python(text)
    if ext in HASH_COMMENT or os.path.basename(name) in ("meson.build", "meson.options") \
            or is_shell_script(text):
        return mask_hash(text)
    return None


def is_placeholder(stem):
    """A stand-in name in a usage line or an example message: KERNEL.cu, FILE.json, x.json, k.cu."""
    base = stem.rsplit("/", 1)[-1]
    return len(base) == 1 or (base.isupper() and base.isalpha())


def clean_token(tok):
    tok = tok.strip(".:!?>")
    tok = tok.split("#", 1)[0]
    tok = LINE_SUFFIX.sub("", tok)
    return tok.rstrip(".:")


class Checker:
    def __init__(self, root):
        self.root = root
        self.files = tracked_files(root)
        self.file_set = set(self.files)
        self.dirs = set()
        for f in self.files:
            parts = f.split("/")
            for k in range(1, len(parts)):
                self.dirs.add("/".join(parts[:k]))
        self.basenames = {f.rsplit("/", 1)[-1] for f in self.files}
        self.problems = []
        self.reported = set()
        self.sections = self.spec_sections()
        self.headings = {}   # markdown file -> its headings, read when first cited

    def exists(self, rel):
        rel = os.path.normpath(rel).replace(os.sep, "/")
        return rel in self.file_set or rel in self.dirs

    def exists_from(self, name, rel):
        """rel exists from the root or from a folder above the file naming it (a Rust crate's
        comments name its test files relative to the crate: rust/dilattn-sys/tests/header.rs)."""
        folder = os.path.dirname(name)
        while True:
            if self.exists(os.path.join(folder, rel) if folder else rel):
                return True
            if not folder:
                return False
            folder = os.path.dirname(folder)

    def markdown_headings(self, rel):
        path = os.path.join(self.root, rel)
        text = read_text(path) if os.path.isfile(path) else None
        return {l.lstrip("#").strip().lower() for l in (text or "").split("\n") if l.startswith("#")}

    def spec_sections(self):
        path = os.path.join(self.root, "docs", "spec.md")
        if not os.path.isfile(path):
            return None
        sections = set()
        for line in read_text(path).split("\n"):
            m = re.match(r"##\s+(\d+)\.(?:\s|$)", line)
            if m:
                sections.add((int(m.group(1)), None))
            m = re.match(r"###\s+(\d+)\.(\d+)\.?(?:\s|$)", line)
            if m:
                sections.add((int(m.group(1)), int(m.group(2))))
        return sections

    def report(self, name, line_no, what, key=None):
        """One report per file, line and missing path (a markdown link's text and target
        often name the same path)."""
        if key is not None:
            if (name, line_no, key) in self.reported:
                return
            self.reported.add((name, line_no, key))
        self.problems.append(f"{name}:{line_no}: {what}")

    def check_path_token(self, name, line_no, tok):
        if any(c in tok for c in "*<{}$~@="):
            return
        tok = clean_token(tok)
        if not tok:
            return
        if "/" in tok:
            if "://" in tok:
                return
            rel = tok[2:] if tok.startswith("./") else tok
            first = rel.split("/", 1)[0]
            if first not in TOP_FOLDERS or first == "build" or is_placeholder(os.path.splitext(rel)[0]):
                return
            if self.exists_from(name, rel):
                return
            last = rel.rstrip("/").rsplit("/", 1)
            if "." not in last[-1] and not rel.endswith("/") and len(last) == 2 \
                    and self.exists_from(name, last[0]):
                return   # an extension-less name in an existing folder: a build target
            self.report(name, line_no, f"path '{rel}' does not exist", os.path.normpath(rel))
            return
        stem, ext = os.path.splitext(tok)
        if ext not in SOURCE_EXTENSIONS or not re.fullmatch(r"[\w.+-]*\w", stem):
            return
        if tok == SPEC_FILE_WRONG_NAME or tok in EXTERNAL_NAMES or is_placeholder(stem):
            return
        if tok not in self.basenames:
            self.report(name, line_no, f"file '{tok}' does not exist anywhere in the tree")

    def check_md_link(self, name, line_no, target):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return   # a URL, mailto:, or an anchor in the same page
        path = target.split("#", 1)[0]
        if not path:
            return
        rel = os.path.normpath(os.path.join(os.path.dirname(name), path))
        if rel.split(os.sep, 1)[0] == "build":
            return
        if rel.startswith("..") or not self.exists(rel):
            self.report(name, line_no, f"link target '{target}' does not exist", rel)

    def check_spec_citations(self, name, line_no, line):
        for m in SPEC_CITATION.finditer(line):
            numbers = m.group("spec") or m.group("doc")
            cited = [(int(a), int(b) if b else None) for a, b in SECTION_NUMBER.findall(numbers)]
            for sec in cited:
                label = f"{sec[0]}" if sec[1] is None else f"{sec[0]}.{sec[1]}"
                if self.sections is None:
                    self.report(name, line_no, f"'{m.group(0)}' cites section {label}, "
                                               "but docs/spec.md does not exist")
                elif sec not in self.sections:
                    self.report(name, line_no, f"'{m.group(0)}' cites section {label}, "
                                               "which docs/spec.md has no heading for")

    def check_file(self, name):
        text = read_text(os.path.join(self.root, name))
        if text is None:
            return
        lines = text.split("\n")
        for i, line in enumerate(lines, 1):
            if SPEC_FILE_WRONG_NAME in line:
                self.report(name, i, f"names '{SPEC_FILE_WRONG_NAME}'; the specification is "
                                     "docs/spec.md")
            if "SPEC" in line or "spec.md" in line:
                self.check_spec_citations(name, i, line)
            if "README" in line:
                for m in README_SECTION.finditer(line):
                    readme = m.group(1) if m.group(1).endswith(".md") else m.group(1) + ".md"
                    if readme not in self.headings:
                        self.headings[readme] = self.markdown_headings(readme)
                    if m.group(2).strip().lower() not in self.headings[readme]:
                        self.report(name, i, f"{readme} has no section \"{m.group(2)}\"")
        prose = prose_of(name, text)
        if prose is None:
            return
        is_md = name.endswith(".md")
        for i, line in enumerate(prose.split("\n"), 1):
            if not line.strip():
                continue
            if is_md:
                for m in MD_LINK.finditer(line):
                    self.check_md_link(name, i, m.group(1))
                line = MD_LINK.sub("]", line)
            for m in TOKEN.finditer(line):
                self.check_path_token(name, i, m.group(0))

    def run(self):
        if self.sections is None:
            self.report("docs/spec.md", 0, "the specification docs/spec.md does not exist")
        for name in self.files:
            self.check_file(name)
        return self.problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "..", ".."))
    ap.add_argument("--root", default=default_root, help="the repository root")
    args = ap.parse_args(argv)
    checker = Checker(args.root)
    problems = checker.run()
    for p in problems:
        print(p)
    print(f"check_references: {len(checker.files)} files, {len(problems)} dangling "
          f"reference{'s' if len(problems) != 1 else ''}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
