"""python -m dilattn info: print the package and library versions, the backends that run here
and the library's build information."""
import sys

USAGE = "usage: python -m dilattn info"


def main(argv):
    if argv != ["info"]:
        print(USAGE, file=sys.stderr)
        return 2
    from . import info
    print(info())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
