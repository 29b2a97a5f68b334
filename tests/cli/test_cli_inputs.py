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


# ---------------------------------------------------------------- hostile .npz archives
# A zip archive is a central directory of entries, each pointing at a local header and its data.
# Nothing forces the entries to point at distinct members: a small file can name one member many
# times (a zip bomb by repetition), or name members whose local headers say something else. The
# tool checks the names in the central directory against the arrays it wants first, refuses a
# name twice and members that overlap or disagree with their local header, so the work is bounded
# by the file's size: exit 2 at once, naming the file and the member.

def stored_member(name, payload, crc=None):
    """A local header and data, zip method 0, with the CRC (or the given crc) and sizes."""
    import zlib
    crc = zlib.crc32(payload) if crc is None else crc
    head = (b"PK\x03\x04" + (20).to_bytes(2, "little") + bytes(4) + bytes(4) +
            crc.to_bytes(4, "little") + len(payload).to_bytes(4, "little") * 2 +
            len(name).to_bytes(2, "little") + bytes(2) + name)
    return head + payload, crc


def crafted_npz(path, members, entries):
    """members: [(local name, payload)] written in order; entries: [(central name, member index)]
    for the central directory, each pointing at that member's local header."""
    body, located = b"", []
    for name, payload in members:
        blob, crc = stored_member(name, payload)
        located.append((len(body), crc, len(payload)))
        body += blob
    npz_from_parts(path, body, [(name, *located[m]) for name, m in entries])


def npz_from_parts(path, body, entries):
    """The members' bytes `body`, then a central directory of entries (name, local header
    offset, crc, size), then the end record."""
    central = bytearray()
    for name, offset, crc, size in entries:
        central += (b"PK\x01\x02" + (20).to_bytes(2, "little") * 2 + bytes(4) + bytes(4) +
                    crc.to_bytes(4, "little") + size.to_bytes(4, "little") * 2 +
                    len(name).to_bytes(2, "little") + bytes(2) + bytes(2) + bytes(2) + bytes(2) +
                    bytes(4) + offset.to_bytes(4, "little") + name)
    n = len(entries)
    end = (b"PK\x05\x06" + bytes(4) + n.to_bytes(2, "little") * 2 +
           len(central).to_bytes(4, "little") + len(body).to_bytes(4, "little") + bytes(2))
    path.write_bytes(body + bytes(central) + end)


def npy_bytes(array):
    import io
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array))
    return buf.getvalue()


# A run of the old reader took ~60 GiB of copies and CRCs: these limits make that a failure.
BOMB_GUARD = dict(timeout=30, memory_limit=2 << 30)


@pytest.mark.parametrize("name", [b"x{}.npy", b"row_ptr.npy"])
def test_npz_bomb_of_repeated_entries_fails_at_once(tmp_path, inputs, name):
    # 60,000 central-directory entries pointing at one stored 1 MiB member (4.4 MB on disk).
    _, paths = inputs
    payload = npy_bytes(np.zeros(1 << 17, np.int64))
    entries = [(name.replace(b"{}", str(i).encode()), 0) for i in range(60000)]
    crafted_npz(tmp_path / "m.npz", [(entries[0][0], payload)], entries)
    word = "unexpected array 'x0'" if b"{}" in name else "member 'row_ptr' appears twice"
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"), "m.npz", word, **BOMB_GUARD)


def test_npz_members_that_overlap_are_refused(tmp_path, inputs):
    # col_idx's local header and data lie inside row_ptr's data: each entry alone is a valid
    # zip member whose local header agrees with it, but the bytes count twice.
    _, paths = inputs
    inner, inner_crc = stored_member(b"col_idx.npy", npy_bytes(np.array([0, 1, 2])))
    row_ptr = npy_bytes(np.array([0, 1, 2, 3]))
    outer, outer_crc = stored_member(b"row_ptr.npy", row_ptr + inner)
    inner_at = 30 + len(b"row_ptr.npy") + len(row_ptr)
    npz_from_parts(tmp_path / "m.npz", outer,
                   [(b"row_ptr.npy", 0, outer_crc, len(row_ptr) + len(inner)),
                    (b"col_idx.npy", inner_at, inner_crc, len(inner) - 30 - len(b"col_idx.npy"))])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"),
                     "m.npz", "members 'row_ptr' and 'col_idx' overlap", **BOMB_GUARD)


def test_npz_local_header_must_agree_with_the_central_directory(tmp_path, inputs):
    # The central directory says row_ptr.npy, the local header col_idx.npy: a reader walking the
    # local headers and one walking the central directory would see different archives.
    _, paths = inputs
    crafted_npz(tmp_path / "m.npz", [(b"col_idx.npy", npy_bytes(np.array([0, 1, 2])))
                                     , (b"row_ptr.npy", npy_bytes(np.array([0, 1, 2, 3])))],
                [(b"row_ptr.npy", 0), (b"col_idx.npy", 1)])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"),
                     "m.npz", "member 'row_ptr'", "local header", **BOMB_GUARD)


def test_npz_member_running_into_the_central_directory_is_refused(tmp_path, inputs):
    # The last member's sizes, in the central directory, grown by 40 bytes: its data would end
    # inside the central directory itself (the bytes are there, so only this check stops it).
    _, paths = inputs
    path = tmp_path / "m.npz"
    write_bsr(path, [0, 1, 2, 3], [0, 1, 2])
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        last = max(z.infolist(), key=lambda i: i.header_offset)
    central = raw.index(b"PK\x01\x02")
    for at in [i for i in range(central, len(raw) - 4) if raw[i:i + 4] == b"PK\x01\x02"]:
        if int.from_bytes(raw[at + 42:at + 46], "little") == last.header_offset:
            grown = (last.file_size + 40).to_bytes(4, "little")
            raw[at + 20:at + 24] = grown
            raw[at + 24:at + 28] = grown
    path.write_bytes(bytes(raw))
    name = last.filename[:-len(".npy")]
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", path, "--block-size", "4"),
                     "m.npz", f"member '{name}' runs into the central directory", **BOMB_GUARD)


def test_nul_in_npz_member_name_is_escaped_not_cut(tmp_path, inputs):
    _, paths = inputs
    crafted_npz(tmp_path / "m.npz", [(b"row\x00ptr.npy", npy_bytes(np.array([0, 1, 2, 3])))],
                [(b"row\x00ptr.npy", 0)])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"),
                     "m.npz", "unexpected array 'row\\x00ptr' (allowed: row_ptr, col_idx, head_ptr)")


def test_nul_in_npy_descr_is_escaped_not_cut(tmp_path, inputs):
    arrs, paths = inputs
    npy_with_header(paths["q"], "{'descr': '<f\x004', 'fortran_order': False, 'shape': (1, 12, 2, 4)}",
                    arrs["q"].tobytes())
    p = run(*forward_args(tmp_path, paths))
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "\x00" not in p.stderr, repr(p.stderr)
    assert "<f\\x004" in p.stderr, repr(p.stderr)
    assert p.stderr.rstrip("\n").endswith(("'", ")", "]")) or "expected" in p.stderr, repr(p.stderr)
