"""test_cli_inputs.py - the `dilattn` command line: reading inputs: .npy format versions 1-3 and .npz
archives against numpy's own reader and writer; every malformed or unusable input (magic, header,
payload, dtype, order, shape, non-regular file, compressed or corrupt .npz) exits 2 naming the
file.
Run by meson (`meson test -C build --suite cli`) with DILATTN_CLI set to the executable.
"""
import os
import zipfile

import numpy as np
import pytest

from cli_support import (expect_bad_input, forward, forward_args, make_inputs, qkv_flags, run,
                         write_bsr)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_reads_every_npy_format_version(tmp_path, version):
    arrs, paths = make_inputs(tmp_path)
    o_v1, _ = forward(tmp_path, paths)
    for name in ("q", "k", "v"):
        with open(paths[name], "wb") as f:
            np.lib.format.write_array(f, arrs[name], version=version)
    o_vn, _ = forward(tmp_path, paths)
    assert np.array_equal(o_v1, o_vn)
    with open(tmp_path / "x.npy", "wb") as f:
        np.lib.format.write_array(f, arrs["q"], version=version)
    assert run("compare", tmp_path / "x.npy", paths["q"], expect=0).stdout.startswith("max_abs_err=0 ")


def test_npz_round_trip_through_numpy(tmp_path):
    # Our reader takes np.savez's archive (zip64 extras, int32), our writer is read by np.load.
    row_ptr, col_idx, head_ptr = [0, 2, 3, 0, 1, 3], [0, 1, 1, 0, 0, 1], [0, 3, 6]
    write_bsr(tmp_path / "in.npz", row_ptr, col_idx, head_ptr, dtype=np.int32)
    run("mask", "--mask", tmp_path / "in.npz", "--n", 8, "--block-size", 4, "--out",
        tmp_path / "out.npz", expect=0)
    raw = (tmp_path / "out.npz").read_bytes()
    with zipfile.ZipFile(tmp_path / "out.npz") as z:
        assert z.testzip() is None  # every CRC-32 in the central directory checks
        for i in z.infolist():
            assert i.compress_type == zipfile.ZIP_STORED
            local = raw[i.header_offset:i.header_offset + 30]  # zipfile ignores the local copy
            assert local[:4] == b"PK\x03\x04"
            assert int.from_bytes(local[14:18], "little") == i.CRC == zipfile.crc32(z.read(i))
    got = np.load(tmp_path / "out.npz")
    assert sorted(got.files) == ["col_idx", "head_ptr", "row_ptr"]
    for name, want in (("row_ptr", row_ptr), ("col_idx", col_idx), ("head_ptr", head_ptr)):
        assert got[name].dtype == np.int64 and got[name].tolist() == want


def test_bad_magic_names_the_file(tmp_path):
    _, paths = make_inputs(tmp_path)
    paths["k"].write_bytes(b"PK\x03\x04 not an npy file at all")
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["k"], "magic")


def test_truncated_header_names_the_file(tmp_path):
    _, paths = make_inputs(tmp_path)
    paths["q"].write_bytes(paths["q"].read_bytes()[:40])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "truncated")


def test_truncated_payload_names_the_file(tmp_path):
    _, paths = make_inputs(tmp_path)
    paths["v"].write_bytes(paths["v"].read_bytes()[:-4])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"], "payload")


def test_int32_input_is_a_dtype_error(tmp_path):
    _, paths = make_inputs(tmp_path)
    np.save(paths["q"], np.zeros((1, 12, 2, 4), "<i4"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "<i4")


def test_big_endian_input_is_a_dtype_error(tmp_path):
    _, paths = make_inputs(tmp_path)
    np.save(paths["q"], np.zeros((1, 12, 2, 4), ">f4"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], ">f4")


def test_mixed_dtypes_name_the_odd_file(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["v"], arrs["v"].astype("<f8"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"], "<f8")


def test_fortran_order_is_rejected(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["q"], np.asfortranarray(arrs["q"]))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "fortran_order")


def test_shape_mismatches_name_the_file(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["v"], arrs["v"][:, :10])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"], "shape")
    np.save(paths["v"], arrs["v"])
    np.save(paths["k"], arrs["k"][..., :3])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["k"], "shape")
    np.save(paths["k"], arrs["k"][0])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["k"], "dimensions")


def test_backward_shape_mismatches_name_the_file(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["do"], arrs["do"][:, :5])
    args = ["backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp_path / "dq.npy",
            "--dk", tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy", "--backend", "ref"]
    expect_bad_input(tmp_path, args, paths["do"], "shape")
    np.save(paths["do"], arrs["do"])
    np.save(tmp_path / "lse.npy", np.zeros((1, 2, 11)))
    expect_bad_input(tmp_path, args + ["--o", paths["q"], "--lse", tmp_path / "lse.npy"],
                     tmp_path / "lse.npy", "shape")
    expect_bad_input(tmp_path, args + ["--o", paths["q"]], "--o", "--lse")


def test_compressed_npz_suggests_savez(tmp_path):
    _, paths = make_inputs(tmp_path)
    np.savez_compressed(tmp_path / "m.npz", row_ptr=np.array([0, 1, 2, 3]), col_idx=np.array([0, 1, 2]))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"), "m.npz", "np.savez")


def test_corrupt_npz_fails_its_crc(tmp_path):
    _, paths = make_inputs(tmp_path)
    write_bsr(tmp_path / "m.npz", [0, 1, 2, 3], [0, 1, 2])
    raw = bytearray((tmp_path / "m.npz").read_bytes())
    raw[raw.index(b"\x93NUMPY") + 100] ^= 0xFF  # flip a byte of the first member's payload
    (tmp_path / "m.npz").write_bytes(bytes(raw))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"), "m.npz", "CRC")


# ---------------------------------------------------------------- only regular files are read
# A directory, a device or a FIFO given as an input exits 2 naming it, without reading it (a FIFO
# would block forever, /dev/zero would grow memory without bound); the memory limit and timeout
# turn the old behaviour into a failure instead of a stuck test machine.
GUARD = dict(timeout=20, memory_limit=2 << 30)


def test_directory_input_is_named(tmp_path, inputs):
    _, paths = inputs
    (tmp_path / "adir").mkdir()
    paths["q"] = tmp_path / "adir"
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), "adir", "not a regular file", **GUARD)


def test_device_input_is_named(tmp_path, inputs):
    _, paths = inputs
    paths["k"] = "/dev/zero"
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), "/dev/zero", "not a regular file",
                     **GUARD)


def test_fifo_input_is_never_opened(tmp_path, inputs):
    _, paths = inputs
    os.mkfifo(tmp_path / "pipe")
    paths["v"] = tmp_path / "pipe"
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), "pipe", "not a regular file", **GUARD)


def test_fifo_mask_and_compare_inputs_are_never_opened(tmp_path, inputs):
    _, paths = inputs
    os.mkfifo(tmp_path / "pipe")
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "pipe"), "pipe",
                     "not a regular file", **GUARD)
    expect_bad_input(tmp_path, ["compare", paths["q"], tmp_path / "pipe"], "pipe",
                     "not a regular file", **GUARD)


def test_file_size_is_checked_against_the_header_before_reading(tmp_path, inputs):
    # A sparse 64 GiB file behind a valid [1, 12, 2, 4] header: the size says the payload is
    # wrong, so nothing past the header is read.
    arrs, paths = inputs
    with open(paths["q"], "r+b") as f:
        f.truncate(64 << 30)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "payload", **GUARD)


# ---------------------------------------------------------------- .npy headers as numpy reads them


def npy_with_header(path, header, payload):
    """A version 1.0 .npy file with this header dict text, padded as numpy pads."""
    text = header.encode("latin1")
    pad = 64 - (10 + len(text) + 1) % 64
    text += b" " * (pad % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + payload)


def numpy_reads(path):
    try:
        return np.load(path)
    except Exception:  # noqa: BLE001 - any failure is numpy rejecting the header
        return None


SHAPE = "(1, 12, 2, 4)"
HEADERS = [
    # numpy reads these: key order, quotes, whitespace and trailing commas are Python's business.
    "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % SHAPE,
    "{'shape': %s, 'fortran_order': False, 'descr': '<f4'}" % SHAPE,
    '{"descr": "<f4", "fortran_order": False, "shape": (1,12,2,4,)}',
    "{ 'descr' :'<f4' ,\n 'fortran_order':False,'shape':( 1 , 12 , 2 , 4 ) }",
    # numpy rejects these (wrong keys, a key inside a string, structure, values).
    "{'note': \"'shape': (1, 12, 2, 4)\", 'descr': '<f4', 'fortran_order': False, 'shape': (96,)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4), 'extra': 1}",
    "{'descr': '<f4', 'fortran_order': False}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4)} trailing",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4)",
    "{'descr': '<f4' 'fortran_order': False, 'shape': (1, 12, 2, 4)}",
    "{'descr': '<f4', 'fortran_order': 0, 'shape': (1, 12, 2, 4)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': [1, 12, 2, 4]}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (96)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4,,)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4.0)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, -4)}",
    "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1, 12, 2, 4)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4)}}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 04)}",
]


@pytest.mark.parametrize("header", HEADERS)
def test_npy_header_is_read_as_numpy_reads_it(tmp_path, inputs, header):
    arrs, paths = inputs
    npy_with_header(paths["q"], header, arrs["q"].tobytes())
    want = numpy_reads(paths["q"])
    if want is None:
        p = run("compare", paths["q"], paths["q"], expect=2)
        assert str(paths["q"]) in p.stderr and len(p.stderr.strip().splitlines()) == 1
    else:
        np.save(tmp_path / "numpy.npy", want)  # same shape and values, or compare fails
        assert want.shape == (1, 12, 2, 4)
        run("compare", paths["q"], tmp_path / "numpy.npy", "--atol", "0", "--rtol", "0", expect=0)


@pytest.mark.parametrize("header", [
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4), 'shape': (96,)}",
    "{'descr': '<f4', 'shape': (96,), 'fortran_order': False, 'shape': (1, 12, 2, 4)}",
    "{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 2, 4)}",
])
def test_npy_header_with_a_key_twice_is_refused(tmp_path, inputs, header):
    # numpy's literal_eval keeps the last value; a header like this is damaged or crafted, and
    # reading either value would be a guess.
    arrs, paths = inputs
    npy_with_header(paths["q"], header, arrs["q"].tobytes())
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "appears twice")


@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")  # zipfile's, on purpose here
def test_npz_with_a_member_twice_is_rejected(tmp_path, inputs):
    # np.load would take the last 'row_ptr.npy'; the tool refuses to guess.
    _, paths = inputs
    with zipfile.ZipFile(tmp_path / "m.npz", "w") as z:
        for row_ptr in ([0, 1, 2, 3], [0, 0, 0, 0]):
            with z.open("row_ptr.npy", "w", force_zip64=False) as f:
                np.lib.format.write_array(f, np.array(row_ptr, np.int64))
        with z.open("col_idx.npy", "w") as f:
            np.lib.format.write_array(f, np.array([0, 1, 2], np.int64))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"),
                     "m.npz", "member 'row_ptr' appears twice")
