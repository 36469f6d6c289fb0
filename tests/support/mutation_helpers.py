"""Byte-level mutations for the property tests of the parsers."""

from __future__ import annotations

from hypothesis import strategies as st


def edit_lists(max_pos: int, byte, min_size: int = 0, max_size: int = 3):
    """Lists of ``(position, byte, "set" | "ins" | "del")`` edits."""
    op = st.sampled_from(["set", "ins", "del"])
    return st.lists(
        st.tuples(st.integers(0, max_pos), byte, op), min_size=min_size, max_size=max_size
    )


def apply_edits(data: bytes, edits) -> bytes:
    """``data`` with each edit applied in turn (positions wrap around its length)."""
    buf = bytearray(data)
    for pos, byte, op in edits:
        pos %= len(buf) + 1
        if op == "set" and pos < len(buf):
            buf[pos] = byte
        elif op == "ins":
            buf[pos:pos] = bytes([byte])
        elif op == "del" and pos < len(buf):
            del buf[pos]
    return bytes(buf)
