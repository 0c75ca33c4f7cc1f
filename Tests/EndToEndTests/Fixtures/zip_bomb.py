#!/usr/bin/env python3
"""Writes a zip whose entries inflate to far more than the archive's size: a zip bomb for the
origin's patch limits. Each entry is `size` bytes of zeros, deflated once and written N times.

usage: zip_bomb.py ENTRIES SIZE [--declare BYTES] OUT:TAG [OUT:TAG ...]

--declare: the uncompressed size the headers state for each entry (default: the true size). A
smaller figure makes a lying archive: its directory sums to little, its streams inflate to much.
At most 65,534 entries (no zip64). Each OUT gets a small extra entry holding TAG, so that the archives differ; the stream is
deflated once for all of them.
"""
import struct
import sys
import zlib


def main():
    args = sys.argv[1:]
    declare = None
    if "--declare" in args:
        i = args.index("--declare")
        declare = int(args[i + 1])
        del args[i:i + 2]
    entries, size = int(args[0]), int(args[1])
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(64 << 20)
    parts = []
    crc = 0
    left = size
    while left > 0:
        piece = chunk if left >= len(chunk) else bytes(left)
        parts.append(compressor.compress(piece))
        crc = zlib.crc32(piece, crc)
        left -= len(piece)
    parts.append(compressor.flush())
    stream = b"".join(parts)
    stated = size if declare is None else declare
    for target in args[2:]:
        out, tag = target.rsplit(":", 1)
        data = tag.encode()
        files = [("level/part-%03d.bin" % n, stream, crc, stated, 8) for n in range(entries)]
        files.append(("tag.txt", data, zlib.crc32(data), len(data), 0))
        write(out, files)


def write(out, files):
    central = []
    offset = 0
    with open(out, "wb") as f:
        for name, data, crc32, uncompressed, method in files:
            encoded = name.encode()
            local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc32, len(data), uncompressed, len(encoded), 0)
            f.write(local + encoded + data)
            central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x0314, 20, 0, method, 0, 0x21, crc32, len(data), uncompressed,
                                   len(encoded), 0, 0, 0, 0, 0o100644 << 16, offset) + encoded)
            offset += len(local) + len(encoded) + len(data)
        directory = b"".join(central)
        f.write(directory)
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(files), len(files), len(directory), offset, 0))


if __name__ == "__main__":
    main()
