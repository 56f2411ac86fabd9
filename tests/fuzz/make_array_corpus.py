#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_arrays (corpus/arrays/) with the standard library only:
small .npy files as numpy.save writes them (every dtype family, Fortran order, format 2.0,
scalar and empty), .npz archives stored and deflated as numpy.savez/savez_compressed write
them, and IDX files plain and gzipped. Run it from anywhere; it rewrites the seed files."""
import gzip
import io
import os
import struct
import zipfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "arrays")


def npy(descr, shape, payload, fortran=False, version=1):
    dims = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, dims)
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode() + payload


def npz(members, compress):
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members:
            with z.open(name + ".npy", "w", force_zip64=True) as f:  # as numpy does
                f.write(data)
    return buf.getvalue()


def idx(type_code, shape, payload):
    return bytes([0, 0, type_code, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape) + payload


def main():
    os.makedirs(OUT, exist_ok=True)
    f4 = npy("<f4", (2, 3), struct.pack("<6f", 1.5, -2, 3, 4, 5, 6))
    i8 = npy("<i8", (), struct.pack("<q", -7))
    seeds = {
        "f4_2x3.npy": f4,
        "i8_scalar.npy": i8,
        "b1_3.npy": npy("|b1", (3,), b"\x01\x00\x01"),
        "u1_fortran.npy": npy("|u1", (2, 3), bytes([0, 3, 1, 4, 2, 5]), fortran=True),
        "f8_empty.npy": npy("<f8", (0, 4), b""),
        "i4_v2.npy": npy("<i4", (2,), struct.pack("<2i", 1, -1), version=2),
        "f2_u2.npy": npy("<f2", (1, 2), b"\x00\x3c\x00\xc0"),
        "stored.npz": npz([("x", f4), ("y", i8)], compress=False),
        "deflated.npz": npz([("x", f4), ("zeros", npy("<f4", (64,), bytes(256)))], compress=True),
        "u1_2x2x2.idx": idx(0x08, (2, 2, 2), bytes(range(8))),
        "f8_2.idx": idx(0x0E, (2,), struct.pack(">2d", 0.5, -1)),
        "i4_3.idx.gz": gzip.compress(idx(0x0C, (3,), struct.pack(">3i", 1, 2, -3)), mtime=0),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
