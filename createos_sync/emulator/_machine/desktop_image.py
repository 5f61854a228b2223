"""Screenshots of the emulated desktop: Xvfb's frame buffer file (XWD) to PNG.

The standard library only: the desktop agent runs with ``python3 -I -S`` inside
the sandbox and receives this module's source as an argument (``desktop_agent``).
"""

from __future__ import annotations

import os
import struct
import zlib

Image = tuple[int, int, bytes]  # width, height, RGB rows


def frame(fbdir: str) -> Image:
    """A screen's pixels, read from its Xvfb's frame buffer file (an XWD image)."""
    with open(os.path.join(fbdir, "Xvfb_screen0"), "rb") as f:
        raw = f.read()
    header = struct.unpack(">25I", raw[:100])
    header_size, width, height, byte_order = header[0], header[4], header[5], header[7]
    bits_per_pixel, line_bytes, ncolors = header[11], header[12], header[19]
    if bits_per_pixel != 32:
        raise OSError("unsupported frame buffer depth")
    start = header_size + ncolors * 12
    rgb = bytearray(width * height * 3)
    # Whole channels at a time (slices run in C): BGRX little-endian, XRGB big-endian.
    order = (2, 1, 0) if byte_order == 0 else (1, 2, 3)
    for row in range(height):
        line = raw[start + row * line_bytes : start + row * line_bytes + width * 4]
        out = memoryview(rgb)[row * width * 3 : (row + 1) * width * 3]
        part = bytearray(width * 3)
        for channel, offset in enumerate(order):
            part[channel::3] = line[offset::4]
        out[:] = part
    return width, height, bytes(rgb)


def crop(image: Image, x: int, y: int, w: int, h: int) -> Image:
    """The region of ``image`` at (x, y), w by h (cut at the edges); ValueError if empty."""
    width, height, rgb = image
    w, h = min(w, width - x), min(h, height - y)
    if x < 0 or y < 0 or w <= 0 or h <= 0:
        raise ValueError("the region is outside the screen")
    rows = (rgb[((y + r) * width + x) * 3 : ((y + r) * width + x + w) * 3] for r in range(h))
    return w, h, b"".join(rows)


def png(image: Image) -> bytes:
    """``image`` as a PNG file (8-bit RGB, zlib)."""
    width, height, rgb = image
    stride = width * 3
    raw = b"".join(b"\x00" + rgb[r * stride : (r + 1) * stride] for r in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    chunks = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks
