"""The embedded AWS emulation: a moto server on loopback that every function reaches through
`AWS_ENDPOINT_URL`, exactly as it would reach the real services.

Real DynamoDB applies each request to an item atomically. moto evaluates a condition and then
writes in plain Python, so two threads could interleave inside one request; that is a flaw of
the emulator, not behaviour our code may rely on. One lock around the DynamoDB backend's request
methods restores request-level atomicity, and nothing more: races *between* requests (the ones
Joinplane's conditional writes must survive) are untouched.

A cancelled TransactWriteItems is the other flaw corrected here. moto rolls it back by swapping in a
deep copy of every table it touched, so the stream records the failed attempt appended stay in the
old table's shard (which shard iterators keep reading: phantom events, then silence), and later
writes go to a shard nobody reads. DynamoDB writes nothing for a cancelled transaction. The fix
keeps the original table object, restores its items from moto's copy, and drops the failed
attempt's stream records.

KMS's Sign is the third: moto 5.2.5 ignores `MessageType`, so it hashes a DIGEST message again
(its signature verifies over SHA-256 of the digest, never the message) and signs RAW messages of
any size. Real KMS signs a DIGEST as the hash it is and refuses RAW messages over 4096 bytes; the
patch below does both, for the ECC keys Joinplane's CAs use, so that CRLs too large to sign RAW
are signed here as they are in AWS.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

_ATOMIC_METHODS = (
    "put_item",
    "get_item",
    "query",
    "scan",
    "update_item",
    "delete_item",
    "transact_write_items",
    "transact_get_items",
    "batch_get_item",
    "batch_write_item",
)
_lock = threading.RLock()
_MAX_SHARD_ITERATORS = 10_000


def _make_dynamodb_requests_atomic() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    for name in _ATOMIC_METHODS:
        method = getattr(DynamoDBBackend, name)
        if getattr(method, "_joinplane_atomic", False):
            continue

        def atomic(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with _lock:
                    return original(*args, **kwargs)

            wrapper._joinplane_atomic = True  # type: ignore[attr-defined]
            return wrapper

        if name == "transact_write_items":
            method = _rolled_back_in_place(method)
        setattr(DynamoDBBackend, name, atomic(method))


def _rolled_back_in_place(original: Callable[..., Any]) -> Callable[..., Any]:
    """moto backs a transaction up with a deep copy of the whole table (every item, every stream
    record) once per *action*: a 53-action accept-join on a table with a long stream history made
    53 such copies under the backend lock, and every other request waited (latency grew with the
    table's history, several seconds per commit). Only the items a transaction names can change,
    so those are saved once, moto's whole-table copy is skipped, and a cancelled transaction puts
    those items back in place and drops the failed attempt's stream records."""
    import copy

    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    class _NoTableCopy:
        """moto.dynamodb.models' `copy`, minus the whole-table backup (we keep our own)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        def deepcopy(self, value: Any, *args: Any) -> Any:
            if isinstance(value, Table):
                return value
            return copy.deepcopy(value, *args)

    models.copy = _NoTableCopy()  # type: ignore[attr-defined,assignment]

    @functools.wraps(original)
    def transact(backend: Any, transact_items: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        saved: list[tuple[Any, Any, Any, Any]] = []
        for action in transact_items:
            op = next(iter(action.values()))
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            key = op.get("Key") or {
                name: op["Item"][name]
                for name in (table.hash_key_attr, table.range_key_attr)
                if name is not None and name in op.get("Item", {})
            }
            hash_value = DynamoType(key[table.hash_key_attr]) if table.hash_key_attr in key else None
            range_value = (
                DynamoType(key[table.range_key_attr])
                if table.range_key_attr is not None and table.range_key_attr in key
                else None
            )
            if hash_value is None:
                continue
            current = table.items.get(hash_value, {})
            current = current.get(range_value) if table.range_key_attr is not None else current
            saved.append((table, hash_value, range_value, copy.deepcopy(current) if current else None))
        streamed = {
            id(t): len(t.stream_shard.items) for t in backend.tables.values() if t.stream_shard is not None
        }
        try:
            return original(backend, transact_items, *args, **kwargs)
        except Exception:
            for table, hash_value, range_value, item in reversed(saved):
                bucket = table.items.setdefault(hash_value, {}) if table.range_key_attr else table.items
                slot = range_value if table.range_key_attr else hash_value
                if item is None:
                    bucket.pop(slot, None)
                else:
                    bucket[slot] = item
            for table in backend.tables.values():
                if table.stream_shard is not None and id(table) in streamed:
                    del table.stream_shard.items[streamed[id(table)] :]
            raise

    return transact


@dataclass
class Emulator:
    endpoint_url: str
    _server: Any

    def stop(self) -> None:
        self._server.stop()

    def reset(self) -> None:
        """Forget every resource (moto's reset API), for a clean slate between tests."""
        import urllib.request

        url = f"{self.endpoint_url}/moto-api/reset"
        request = urllib.request.Request(url, method="POST")  # noqa: S310 - loopback URL we built
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass


def _bound_stream_iterators() -> None:
    """moto keeps every shard iterator it ever issued, and a stream poller asks for a new one
    ten times a second. Real iterators expire after 15 minutes; here the oldest are dropped once
    there are many, which no poller notices (each uses only its newest)."""
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    original = DynamoDBStreamsBackend.get_records
    if getattr(original, "_joinplane_bounded", False):
        return

    @functools.wraps(original)
    def get_records(self: Any, iterator_arn: str, limit: int) -> Any:
        result = original(self, iterator_arn, limit)
        iterators = self.shard_iterators
        while len(iterators) > _MAX_SHARD_ITERATORS:
            try:
                iterators.pop(next(iter(iterators)), None)
            except (RuntimeError, StopIteration):  # another request thread got there first
                break
        return result

    get_records._joinplane_bounded = True  # type: ignore[attr-defined]
    DynamoDBStreamsBackend.get_records = get_records  # type: ignore[method-assign]


# What real KMS signs as MessageType=RAW, at most (KMS API reference, Sign: Message).
KMS_MAX_RAW_MESSAGE = 4096


def _kms_sign_message_types() -> None:
    import base64
    import json

    from moto.kms.exceptions import ValidationException
    from moto.kms.responses import KmsResponse

    original = KmsResponse.sign
    if getattr(original, "_joinplane_message_types", False):
        return

    @functools.wraps(original)
    def sign(self: Any) -> str:
        message_type = self._get_param("MessageType") or "RAW"
        message = self._get_param("Message") or b""  # moto's _get_param decodes the base64
        if message_type == "RAW" and len(message) > KMS_MAX_RAW_MESSAGE:
            raise ValidationException(
                f"Message of {len(message)} bytes is longer than {KMS_MAX_RAW_MESSAGE}: use DIGEST"
            )
        if message_type != "DIGEST":
            return original(self)
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, utils

        algorithm = self._get_param("SigningAlgorithm")
        if algorithm != "ECDSA_SHA_256" or len(message) != 32:
            raise ValidationException("Digest is invalid length for algorithm " + str(algorithm))
        key = self.kms_backend.describe_key(self._get_param("KeyId"))
        private_key = getattr(key.private_key, "private_key", None)
        if not isinstance(private_key, ec.EllipticCurvePrivateKey):
            raise ValidationException("the emulator signs DIGEST messages with ECC keys only")
        signature = private_key.sign(message, ec.ECDSA(utils.Prehashed(hashes.SHA256())))
        return json.dumps(
            {
                "KeyId": key.arn,
                "Signature": base64.b64encode(signature).decode(),
                "SigningAlgorithm": algorithm,
            }
        )

    sign._joinplane_message_types = True  # type: ignore[attr-defined]
    KmsResponse.sign = sign  # type: ignore[method-assign]


def start(port: int = 0) -> Emulator:
    """Start moto on 127.0.0.1 (port 0: any free port) in this process."""
    from moto.server import ThreadedMotoServer

    _make_dynamodb_requests_atomic()
    _bound_stream_iterators()
    _kms_sign_message_types()
    # Werkzeug logs every request at INFO; the local runtime polls many times a second.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return Emulator(endpoint_url=f"http://{host}:{bound}", _server=server)


def use_fake_credentials() -> None:
    """moto needs some credentials and a region; never real ones."""
    for name, value in FAKE_CREDENTIALS.items():
        os.environ.setdefault(name, value)
