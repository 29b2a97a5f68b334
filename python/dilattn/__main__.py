"""python -m dilattn COMMAND, and the `dilattn` command pip installs (pyproject.toml,
[project.scripts]): the Python package's commands. The C command line (forward, backward,
compare and mask on .npy files, docs/cli.md) is a separate program, build/tools/dilattn in a
meson build; the wheel does not carry it, and this command does not pretend to be it."""
import sys
from typing import List, Optional

COMMANDS = {
    "info": "print the package and library versions, the library's path, the backends that "
            "run here and the library's build information",
    "help": "print this help (also --help, -h)",
}
C_COMMANDS = ("forward", "backward", "compare", "mask")


def usage(program: str) -> str:
    lines = [f"usage: {program} COMMAND", "", "commands:"]
    lines += [f"  {name:<6} {text}" for name, text in COMMANDS.items()]
    lines += ["", f"{', '.join(C_COMMANDS)} are commands of the C command line, not of this "
              "package: build it with meson (the binary is build/tools/dilattn; docs/cli.md)."]
    return "\n".join(lines)


def main(argv: List[str], program: str = "python -m dilattn") -> int:
    if argv in (["help"], ["--help"], ["-h"]):
        print(usage(program))
        return 0
    if argv == ["info"]:
        from . import info
        print(info())
        return 0
    if argv and argv[0] in C_COMMANDS:
        print(f"{program}: '{argv[0]}' is a command of the C command line "
              "(build/tools/dilattn after a meson build; docs/cli.md), not of the Python package",
              file=sys.stderr)
        return 2
    print(usage(program), file=sys.stderr)
    return 2


def console(argv: Optional[List[str]] = None) -> int:
    """The `dilattn` console script."""
    return main(sys.argv[1:] if argv is None else argv, program="dilattn")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
