"""_info.py - what was built: versions, the library's path, its backends (python -m dilattn info)."""
from . import _abi


def library_version() -> str:
    """The C library's version as "major.minor.patch" (dilattn_version())."""
    v = _abi.lib().dilattn_version()
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def _package_version():
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("dilattn")
    except (ImportError, PackageNotFoundError):  # running from a source tree
        return library_version()


__version__ = _package_version()


def backend_available(name: str) -> bool:
    """True when the backend ("ref", "cpu", "cuda", "emu") is built and can run here."""
    if name not in _abi.BACKENDS:
        from ._errors import error_for
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"backend={name!r}: expected one of {sorted(_abi.BACKENDS)}")
    return bool(_abi.lib().dilattn_backend_available(_abi.BACKENDS[name]))


def build_info() -> str:
    """The library's dilattn_build_info(): one line per fact."""
    return _abi.lib().dilattn_build_info().decode()


def info() -> str:
    """A report of the package, the library it loaded and the backends that run here."""
    lines = [f"dilattn (Python) {__version__}",
             f"library: {_abi.library_path()} (version {library_version()})"]
    for name in ("ref", "cpu", "cuda", "emu"):
        lines.append(f"backend {name}: {'available' if backend_available(name) else 'not available'}")
    try:
        import torch
        lines.append(f"torch: {torch.__version__} (dilattn.torch takes CPU tensors"
                     + (" and CUDA tensors)" if backend_available("cuda") else
                        "; CUDA tensors need a library built with CUDA)"))
    except ImportError:
        lines.append("torch: not installed (dilattn.torch unavailable; numpy API only)")
    lines.append(build_info().rstrip("\n"))
    return "\n".join(lines)
