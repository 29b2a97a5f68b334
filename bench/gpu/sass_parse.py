"""sass_parse.py - cuobjdump -sass text to kernels, their control-flow graph, and their loops.

The half of bench/gpu/sass_model.py that knows nothing about attention: it reads the SASS text,
splits it per kernel (name, arch), builds the basic blocks and finds the natural loops (a back
edge u -> h where h dominates u; the loop is h and every block that reaches u without passing h).
Natural loops rather than "the instructions between the back-edge branch and its target": ptxas
places parts of an inner loop after the outer loop's back edge, so an address range would both
miss blocks and take in blocks of other loops.

Checked by bench/gpu/test_sass_model.py on bench/gpu/testdata/*.sass.
"""
import re
import subprocess

_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
# The second line of an instruction: the high 64 bits of its 128-bit encoding, whose top 23 bits
# are the scheduling control ptxas wrote (Instr.control).
_HIGH_WORD = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
_PRED = re.compile(r"^@(!?U?P[0-7T])\s+")
_TARGET = re.compile(r"0x([0-9a-f]+)\s*$")


class Instr:
    """One SASS instruction: address, guard predicate ('' when none), opcode with its
    modifiers (HMMA.16816.F32), the operand text, and the high 64 bits of its encoding (high;
    None when the listing has no second line, as in hand-written ones)."""

    __slots__ = ("addr", "pred", "op", "operands", "high")

    def __init__(self, addr, text, high=None):
        self.addr = addr
        self.high = high
        m = _PRED.match(text)
        self.pred = m.group(1) if m else ""
        rest = text[m.end():] if m else text
        parts = rest.split(None, 1)
        self.op = parts[0]
        self.operands = parts[1] if len(parts) > 1 else ""

    @property
    def base(self):
        return self.op.split(".")[0]

    def control(self):
        """The scheduling control ptxas encodes in bits 105-125 of a Volta-and-later instruction
        (bits 41-61 of the high word): stall, the clocks before the warp's next instruction may
        issue (fixed-latency dependencies; 1 to 15); wbar and rbar, the scoreboard (0-5) a
        variable-latency instruction releases when its result is written or its sources read
        (None: none); wait, the mask of scoreboards this instruction waits for; yield. A listing
        without the high word: stall 1, no scoreboards."""
        if self.high is None:
            return {"stall": 1, "yield": 0, "wbar": None, "rbar": None, "wait": 0}
        c = self.high >> 41
        wbar, rbar = (c >> 5) & 7, (c >> 8) & 7
        return {"stall": c & 0xF, "yield": (c >> 4) & 1, "wbar": None if wbar == 7 else wbar,
                "rbar": None if rbar == 7 else rbar, "wait": (c >> 11) & 0x3F}

    def branch_target(self):
        if self.base not in ("BRA", "CALL"):
            return None
        m = _TARGET.search(self.operands)
        return int(m.group(1), 16) if m else None

    def __repr__(self):
        return "%05x %s%s %s" % (self.addr, "@" + self.pred + " " if self.pred else "", self.op,
                                 self.operands)


class Kernel:
    def __init__(self, name, arch):
        self.name = name          # mangled, as cuobjdump prints it
        self.demangled = name
        self.arch = arch          # "sm_80"
        self.instrs = []

    def family_and_args(self):
        """('forward_wmma_kernel', ['__half', '64']) from the demangled name."""
        m = re.match(r"(?:void\s+)?([\w:]+)<(.*)>\(", self.demangled)
        if not m:
            return self.demangled.split("(")[0].split("::")[-1], []
        args = [a.strip() for a in m.group(2).split(",")]
        return m.group(1).split("::")[-1], args


def parse(text, keep=None):
    """Kernels of a cuobjdump -sass listing, in listing order. SASS code lies in 'Fatbin elf
    code' sections, each headed by 'arch = sm_XX'; PTX sections carry no instructions.
    keep(demangled name) -> bool, when given, leaves the other kernels out before their
    instructions are read: a library holds millions of SASS lines, and reading them all takes
    longer than first_light.sh gives the model."""
    names = sorted(set(re.findall(r"Function : (\S+)", text)))
    demangled = dict(zip(names, demangle_names(names)))
    kernels, arch, cur = [], None, None
    for line in text.splitlines():
        if "arch = " in line:
            m = re.match(r"\s*arch = (sm_\d+a?)", line)
            if m:
                arch = m.group(1)
                continue
        if "Function : " in line:
            m = re.match(r"\s*Function : (\S+)", line)
            if m:
                cur = Kernel(m.group(1), arch)
                cur.demangled = demangled.get(cur.name, cur.name)
                if keep is not None and not keep(cur.demangled):
                    cur = None
                else:
                    kernels.append(cur)
                continue
        if cur is None:
            continue
        m = _INSTR.match(line)
        if m:
            cur.instrs.append(Instr(int(m.group(1), 16), m.group(2)))
            continue
        m = _HIGH_WORD.match(line)
        if m and cur.instrs and cur.instrs[-1].high is None:
            cur.instrs[-1].high = int(m.group(1), 16)
    return kernels


def demangle_names(names):
    """Demangled names through c++filt when it is installed; the mangled names otherwise."""
    if not names:
        return []
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return list(names)
    return out if len(out) == len(names) else list(names)


# ---------------------------------------------------------------- control flow
_ENDS_BLOCK = ("BRA", "EXIT", "RET", "BRX", "JMP", "JMX", "CALL")


def _is_subroutine_call(instrs, i):
    """A CALL that returns: ptxas loads the return address (the next instruction's) into a
    register just before it (MOV R16, 0x6ab0; CALL.REL.NOINC 0xb190). A CALL.REL.NOINC without
    one is a jump that leaves a loop (@P0 CALL.REL.NOINC 0x7b80; BRA 0x6d10), a branch."""
    ret = "0x%x" % (instrs[i].addr + 0x10)
    for j in range(max(0, i - 8), i):
        if instrs[j].base in ("MOV", "IMAD") and instrs[j].operands.endswith(", " + ret):
            return True
    return False


class Cfg:
    """Basic blocks of one kernel: blocks[i] is a list of Instr, succ[i] / pred[i] block ids.
    Edges assume converged warps: BRA.DIV (taken only by a diverged warp) never jumps and
    BRA.CONV (taken by a converged one) always does, so the slow paths of warp shuffles drop
    out. A subroutine CALL falls through (its callee is not followed); a guarded branch falls
    through too."""

    def __init__(self, instrs):
        self.instrs = instrs
        index = {ins.addr: i for i, ins in enumerate(instrs)}
        jumps = {}  # instruction index -> (target address or None, falls through)
        for i, ins in enumerate(instrs):
            guarded = ins.pred not in ("", "PT")
            if ins.base == "CALL":
                if not _is_subroutine_call(instrs, i):
                    jumps[i] = (ins.branch_target(), guarded)
            elif ins.op.startswith("BRA.DIV"):
                jumps[i] = (None, True)
            elif ins.op.startswith("BRA.CONV"):
                jumps[i] = (ins.branch_target(), False)
            elif ins.base in _ENDS_BLOCK:
                jumps[i] = (ins.branch_target() if ins.base == "BRA" else None, guarded)
        leaders = {0}
        for i, (t, _) in jumps.items():
            if i + 1 < len(instrs):
                leaders.add(i + 1)
            if t in index:
                leaders.add(index[t])
        starts = sorted(leaders)
        self.blocks = [instrs[s:e] for s, e in zip(starts, starts[1:] + [len(instrs)])]
        block_of = {instrs[s].addr: b for b, s in enumerate(starts)}
        self.succ = [[] for _ in self.blocks]
        for b, (s, e) in enumerate(zip(starts, starts[1:] + [len(instrs)])):
            t, falls = jumps.get(e - 1, (None, True))
            if t in block_of:
                self.succ[b].append(block_of[t])
            if falls and b + 1 < len(self.blocks) and block_of[instrs[e].addr] not in self.succ[b]:
                self.succ[b].append(b + 1)
        self.pred = [[] for _ in self.blocks]
        for b, ss in enumerate(self.succ):
            for s in ss:
                self.pred[s].append(b)

    def dominators(self):
        """dom[b]: the set of blocks dominating b (reachable blocks only; None otherwise)."""
        n = len(self.blocks)
        reach, stack = {0}, [0]
        while stack:
            for s in self.succ[stack.pop()]:
                if s not in reach:
                    reach.add(s)
                    stack.append(s)
        dom = [set(reach) if b in reach else None for b in range(n)]
        dom[0] = {0}
        changed = True
        while changed:
            changed = False
            for b in sorted(reach):
                if b == 0:
                    continue
                ps = [dom[p] for p in self.pred[b] if dom[p] is not None]
                new = set.intersection(*ps) | {b} if ps else {b}
                if new != dom[b]:
                    dom[b], changed = new, True
        return dom

    def loops(self):
        """Natural loops, one per header (back edges to one header merged): a list of
        Loop, outermost first (by size)."""
        dom = self.dominators()
        bodies = {}
        for u, ss in enumerate(self.succ):
            for h in ss:
                if dom[u] is not None and h in dom[u]:
                    body, stack = {h, u}, [u]
                    while stack:
                        x = stack.pop()
                        if x == h:
                            continue
                        for p in self.pred[x]:
                            if p not in body and dom[p] is not None:
                                body.add(p)
                                stack.append(p)
                    bodies.setdefault(h, set()).update(body)
        loops = [Loop(self, h, body) for h, body in bodies.items()]
        loops.sort(key=lambda l: (-len(l.blocks), l.header_addr))
        for l in loops:
            inside = [o for o in loops if o is not l and o.blocks < l.blocks]
            l.children = [o for o in inside if not any(o.blocks < m.blocks for m in inside)]
            l.children.sort(key=lambda o: o.header_addr)
        return loops


class Loop:
    def __init__(self, cfg, header, blocks):
        self.cfg = cfg
        self.header = header
        self.blocks = frozenset(blocks)
        self.header_addr = cfg.blocks[header][0].addr
        self.children = []

    def instrs(self):
        for b in sorted(self.blocks):
            yield from self.cfg.blocks[b]

    def count(self, pred):
        return sum(1 for i in self.instrs() if pred(i))

    def post_dominators(self):
        """pdom[b] for each block b of the loop: the blocks every path from b to the end of an
        iteration passes (the end: the back edge to the header or a jump out of the loop, the
        block -1 here)."""
        cfg, end = self.cfg, -1
        succ = {}
        for b in self.blocks:
            inside = [s for s in cfg.succ[b] if s in self.blocks and s != self.header]
            leaves = len(inside) < len(cfg.succ[b]) or not cfg.succ[b]
            succ[b] = inside + ([end] if leaves else [])
        pdom = {b: set(self.blocks) | {end} for b in self.blocks}
        pdom[end] = {end}
        changed = True
        while changed:
            changed = False
            for b in sorted(self.blocks, reverse=True):
                new = set.intersection(*(pdom[s] for s in succ[b])) | {b}
                if new != pdom[b]:
                    pdom[b], changed = new, True
        return pdom

    def guarded_region(self, block, dom, pdom):
        """The blocks of the loop that run only when the branch nearest above `block` sends
        control its way: the nearest block g that dominates `block`, ends in a branch and is
        not always followed by `block` (block not in pdom[g]); its region is every block
        reachable from g's successor on the way to `block` before the blocks that always
        follow g. (g, region), or (None, empty) if there is no such branch."""
        cfg = self.cfg
        guards = [g for g in self.blocks if g != block and g in dom[block] and
                  block not in pdom[g] and len(cfg.succ[g]) == 2]
        if not guards:
            return None, frozenset()
        g = max(guards, key=lambda x: len(dom[x]))
        region = set()
        for s in cfg.succ[g]:
            r = self.reach_before(s, pdom[g])
            if block in r:
                region |= r
        return g, frozenset(region)

    def reach_before(self, start, stop):
        """The loop's blocks reachable from `start` within one iteration (not through the header)
        before any block of `stop` (a branch's side up to its join: stop = pdom[branch])."""
        seen, stack = set(), [start]
        while stack:
            b = stack.pop()
            if b in seen or b in stop or b not in self.blocks or b == self.header:
                continue
            seen.add(b)
            stack.extend(self.cfg.succ[b])
        return seen

    def descendants(self):
        """Inner loops, pre-order by header address (the order a profile lists them in)."""
        for c in self.children:
            yield c
            yield from c.descendants()

    def __repr__(self):
        return "loop@%05x(%d instrs)" % (self.header_addr, sum(1 for _ in self.instrs()))
