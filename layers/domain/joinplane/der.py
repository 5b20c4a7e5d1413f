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


# --- Writing: just enough to wrap a signature around a TBS that cryptography built -----------------

# ecdsa-with-SHA256 (RFC 5758): the algorithm a KMS ECC_NIST_P256 key signs with.
ECDSA_WITH_SHA256 = "1.2.840.10045.4.3.2"


def length(size: int) -> bytes:
    if size < 0x80:
        return bytes([size])
    encoded = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(encoded)]) + encoded


def element(tag: int, content: bytes) -> bytes:
    return bytes([tag]) + length(len(content)) + content


def sequence(*elements: bytes) -> bytes:
    return element(0x30, b"".join(elements))


def bit_string(content: bytes) -> bytes:
    """A BIT STRING of whole bytes (no unused bits), as a signature is."""
    return element(0x03, b"\x00" + content)


def oid(dotted: str) -> bytes:
    arcs = [int(arc) for arc in dotted.split(".")]
    body = bytearray([40 * arcs[0] + arcs[1]])
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body.extend(reversed(chunk))
    return element(0x06, bytes(body))


def signed(tbs: bytes, algorithm_oid: str, signature: bytes) -> bytes:
    """Certificate, CertificateList and CertificationRequest share this shape (RFC 5280, 2986):
    SEQUENCE { tbs, AlgorithmIdentifier { oid } (ECDSA: parameters absent), BIT STRING signature }."""
    return sequence(tbs, sequence(oid(algorithm_oid)), bit_string(signature))
