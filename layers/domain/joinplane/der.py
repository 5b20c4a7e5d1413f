"""The one piece of DER the domain reads itself: an element of a SEQUENCE, exactly as encoded.

cryptography parses and checks certificates and CSRs, but does not hand back an element's own
bytes: the SubjectPublicKeyInfo as a CSR encodes it (a machine's identity is the hash of those
bytes, not of a re-encoding), or the SPKI of an EK certificate whose key it will not load. Both are
read here from DER cryptography has already accepted. Single-byte tags only: all that
TBSCertificate and CertificationRequestInfo use up to their SPKI.
"""


def header(der: bytes, offset: int) -> tuple[int, int]:
    """(content length, content offset) of the element at `offset`."""
    first = der[offset + 1]
    if first < 0x80:
        return first, offset + 2
    count = first & 0x7F
    return int.from_bytes(der[offset + 2 : offset + 2 + count], "big"), offset + 2 + count


def sequence_element(der: bytes, index: int) -> bytes:
    """The `index`-th element (from 0) of the SEQUENCE `der` starts with, tag and length included."""
    _, offset = header(der, 0)
    for _ in range(index):
        length, content = header(der, offset)
        offset = content + length
    length, content = header(der, offset)
    return der[offset : content + length]
