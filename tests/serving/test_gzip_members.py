"""Answers made of plain chunks and gzip members kept compressed
(``toposcope.serving.httpgzip``)."""

from __future__ import annotations

import gzip
import zlib

from toposcope.serving.httpgzip import (
    GZIP_WBITS,
    UNPACK_PIECE,
    GzipMember,
    encode_answer,
    gzip_chunks,
    plain_chunks,
    plain_length,
)

BIG = b"".join(
    f'toposcope_workload_threads{{workload="w{i}"}} 8.0\n'.encode() for i in range(40000)
)
CHUNKS = [b"# head\n", b"a 1\n", GzipMember.pack([BIG[:100], BIG[100:]]), b"b 2\n", b""]
TEXT = b"# head\na 1\n" + BIG + b"b 2\n"


def members(packed: bytes) -> int:
    """How many gzip members ``packed`` holds."""
    count = 0
    while packed:
        unpacker = zlib.decompressobj(GZIP_WBITS)
        unpacker.decompress(packed)
        assert unpacker.eof
        packed, count = unpacker.unused_data, count + 1
    return count


def test_a_member_knows_its_text_and_is_a_tenth_of_it() -> None:
    member = CHUNKS[2]
    assert isinstance(member, GzipMember) and member.size == len(BIG)
    assert gzip.decompress(member) == BIG
    assert len(member) < len(BIG) / 10


def test_gzip_answer_passes_members_as_they_are_and_packs_the_rest() -> None:
    packed = gzip_chunks(CHUNKS)
    assert any(chunk is CHUNKS[2] for chunk in packed)
    assert members(b"".join(packed)) == 3
    assert gzip.decompress(b"".join(packed)) == TEXT


def test_identity_answer_unpacks_in_bounded_pieces() -> None:
    pieces = list(plain_chunks(CHUNKS))
    assert b"".join(pieces) == TEXT
    assert plain_length(CHUNKS) == len(TEXT)
    assert max(len(piece) for piece in pieces) <= UNPACK_PIECE < len(BIG)


def test_encode_answer_headers_match_the_body_for_each_client() -> None:
    headers, body = encode_answer(CHUNKS, "gzip, deflate")
    packed = b"".join(body)
    assert dict(headers)["Content-Encoding"] == "gzip"
    assert int(dict(headers)["Content-Length"]) == len(packed)
    plain_headers, plain_body = encode_answer(CHUNKS, "identity")
    plain = b"".join(plain_body)
    assert "Content-Encoding" not in dict(plain_headers)
    assert int(dict(plain_headers)["Content-Length"]) == len(plain) == len(TEXT)
    assert gzip.decompress(packed) == plain


def test_an_empty_answer_is_still_valid_gzip() -> None:
    assert gzip.decompress(b"".join(gzip_chunks([]))) == b""
    assert b"".join(plain_chunks([GzipMember.pack([])])) == b""
