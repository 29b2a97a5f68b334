"""test_plan_host_backends.py - a Plan's "auto" asks the library for the host backends alone.

A Plan's tensors are in host memory unless its caller names cuda (dilattn.torch does for CUDA
tensors), while the library's AUTO takes the cuda backend wherever a GPU can run the problem
(docs/spec.md section 14), and a cuda plan refuses host pointers. So "auto" here is AUTO over
the host backends, in AUTO's order: cpu, then ref. Checked by recording the backend each
dilattn_plan_create call is given, which holds on a machine with or without a GPU."""
import dilattn
from dilattn import _abi, _plan

SIZES = (1, 8, 8, 2, 2, 4)  # B, Nq, Nk, H, Hkv, D


def _recording(monkeypatch):
    L = _abi.lib()
    real = L.dilattn_plan_create
    asked = []

    def plan_create(handle, desc, shape, dtype, backend):
        asked.append(backend)
        return real(handle, desc, shape, dtype, backend)

    monkeypatch.setattr(L, "dilattn_plan_create", plan_create)
    return asked


def test_auto_asks_for_the_cpu_backend_first(monkeypatch):
    asked = _recording(monkeypatch)
    plan = _plan.Plan(_plan.Options(), SIZES, "f32")
    assert plan.backend == "cpu"
    assert asked == [_abi.BACKENDS["cpu"]]


def test_auto_falls_to_ref_where_the_cpu_backend_refuses(monkeypatch):
    asked = _recording(monkeypatch)
    plan = _plan.Plan(_plan.Options(), (1, 8, 8, 2, 2, 257), "f32")  # head_dim above cpu's 256
    assert plan.backend == "ref"
    assert asked == [_abi.BACKENDS["cpu"], _abi.BACKENDS["ref"]]


def test_a_named_backend_is_asked_for_as_named(monkeypatch):
    asked = _recording(monkeypatch)
    assert _plan.Plan(_plan.Options(backend="ref"), SIZES, "f32").backend == "ref"
    assert _plan.Plan(_plan.Options(), SIZES, "f32", backend="cpu").backend == "cpu"
    assert asked == [_abi.BACKENDS["ref"], _abi.BACKENDS["cpu"]]


def test_bad_input_fails_on_the_first_backend_with_the_library_message(monkeypatch):
    asked = _recording(monkeypatch)
    try:
        _plan.Plan(_plan.Options(), (1, 8, 8, 3, 2, 4), "f32")  # H not a multiple of Hkv
    except dilattn.Error as e:
        assert "heads" in str(e), str(e)
    else:
        raise AssertionError("a plan with H = 3, Hkv = 2 was made")
    assert asked[0] == _abi.BACKENDS["cpu"]
