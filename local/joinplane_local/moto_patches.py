"""Every change the local runtime makes to moto's own code, in one place, for one moto version.

The embedded emulator runs moto's server in this process. Where moto departs from AWS in a way
the functions or the tests would otherwise come to rely on, it is corrected here, and nowhere else:

- `request_atomicity`: real DynamoDB applies each request to an item atomically. moto evaluates a
  condition and then writes in plain Python, so two threads could interleave inside one request;
  that is a flaw of the emulator, not behaviour our code may rely on. One lock around the DynamoDB
  backend's request methods restores request-level atomicity, and nothing more: races *between*
  requests (the ones Joinplane's conditional writes must survive) are untouched.
- `transaction_rollback`: moto rolls a cancelled TransactWriteItems back by swapping in a deep copy
  of every table it touched, so the stream records the failed attempt appended stay in the old
  table's shard (which shard iterators keep reading: phantom events, then silence), and later
  writes go to a shard nobody reads. DynamoDB writes nothing for a cancelled transaction. The
  correction keeps the original table object, puts back the items the transaction named, and drops
  the failed attempt's stream records.
- `stream_iterators`: moto keeps every shard iterator it ever issued, and a stream poller asks for
  a new one ten times a second. Real iterators expire after 15 minutes; here the oldest are dropped
  once there are many, which no poller notices (each uses only its newest).
- `kms_message_type`: moto's Sign ignores `MessageType`, so it hashes a DIGEST message again (its
  signature verifies over SHA-256 of the digest, never the message) and signs RAW messages of any
  size. Real KMS signs a DIGEST as the hash it is and refuses RAW messages over 4096 bytes; the
  correction does both, for the ECC keys Joinplane's CAs use, so that CRLs too large to sign RAW are
  signed here as they are in AWS.
- `kms_sign_quota`: real KMS refuses Sign calls past the account's request-rate quota with a
  ThrottlingException; moto never does. `kms_sign_quota(per_second)` sets a quota on the
  emulator's Sign calls (None, the default: none), counted over the last second as KMS counts
  them, so a test or a local run can see what a caller sees when KMS throttles.

Each correction reaches into moto's internals (method names, module attributes, how a table holds
its items), which a moto release may change without notice; one that silently stopped applying
would weaken the race tests relying on it without failing any. So `apply()` refuses any moto but
the one these were written and self-tested against (`MOTO_VERSION`, also the pin of
requirements-run.txt and local/pyproject.toml), and tests/local/test_moto_patches.py shows each
correction's effect, every one failing without it. To upgrade moto: change the pins and
`MOTO_VERSION` together, then run that file.
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
from collections.abc import Callable
from typing import Any

MOTO_VERSION = "5.2.5"


class MotoVersionMismatch(RuntimeError):
    """The installed moto is not the one the corrections were written for."""


def check_moto_version(installed: str) -> None:
    if installed != MOTO_VERSION:
        raise MotoVersionMismatch(
            f"moto {installed} is installed, but the local runtime corrects the internals of moto "
            f"{MOTO_VERSION} ({', '.join(PATCHES)}) and cannot tell whether those corrections still "
            f"hold in another version. Install moto=={MOTO_VERSION} (make setup does), or, to upgrade "
            "moto, set the new version in requirements-run.txt, local/pyproject.toml and "
            "joinplane_local.moto_patches.MOTO_VERSION together and run tests/local/test_moto_patches.py."
        )


# --- request_atomicity ----------------------------------------------------------------------------

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


def _request_atomicity() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    for name in _ATOMIC_METHODS:
        setattr(DynamoDBBackend, name, _atomic(getattr(DynamoDBBackend, name)))


def _atomic(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def atomic(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            return original(*args, **kwargs)

    return atomic


# --- transaction_rollback -------------------------------------------------------------------------


def _transaction_rollback() -> None:
    """moto backs a transaction up with a deep copy of the whole table (every item, every stream
    record) once per *action*: a 53-action accept-join on a table with a long stream history made
    53 such copies under the backend lock, and every other request waited (latency grew with the
    table's history, several seconds per commit). Only the items a transaction names can change,
    so those are saved once, moto's whole-table copy is skipped, and a cancelled transaction puts
    those items back in place and drops the failed attempt's stream records. Applied before
    `request_atomicity`, whose lock then holds the whole of it."""
    import copy

    from moto.dynamodb import models
    from moto.dynamodb.models import DynamoDBBackend
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
    original = DynamoDBBackend.transact_write_items

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

    DynamoDBBackend.transact_write_items = transact  # type: ignore[method-assign,assignment]


# --- stream_iterators -----------------------------------------------------------------------------

# Iterators kept before the oldest are dropped: far more than the pollers of any run hold at once.
MAX_SHARD_ITERATORS = 10_000


def _stream_iterators() -> None:
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    original = DynamoDBStreamsBackend.get_records

    @functools.wraps(original)
    def get_records(self: Any, iterator_arn: str, limit: int) -> Any:
        result = original(self, iterator_arn, limit)
        iterators = self.shard_iterators
        while len(iterators) > MAX_SHARD_ITERATORS:
            try:
                iterators.pop(next(iter(iterators)), None)
            except (RuntimeError, StopIteration):  # another request thread got there first
                break
        return result

    DynamoDBStreamsBackend.get_records = get_records  # type: ignore[method-assign]


# --- kms_message_type -----------------------------------------------------------------------------

# What real KMS signs as MessageType=RAW, at most (KMS API reference, Sign: Message).
KMS_MAX_RAW_MESSAGE = 4096


def _kms_message_type() -> None:
    import base64
    import json

    from moto.kms.exceptions import ValidationException
    from moto.kms.responses import KmsResponse

    original = KmsResponse.sign

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

    KmsResponse.sign = sign  # type: ignore[method-assign]


# --- kms_sign_quota -------------------------------------------------------------------------------

_sign_quota: list[float | None] = [None]  # Sign calls a window the emulator answers; None: no quota
_sign_window: list[float] = [1.0]  # the window's length in seconds (KMS counts per second)
_signed_at: list[float] = []  # when the Sign calls of the last window were answered (monotonic)
_quota_lock = threading.Lock()


def kms_sign_quota(per_second: float | None, *, window: float = 1.0) -> None:
    """Throttle the emulator's KMS Sign calls past `per_second` within any `window` seconds (None:
    never). A test that must not depend on how fast a loaded machine runs widens the window."""
    with _quota_lock:
        _sign_quota[0] = per_second
        _sign_window[0] = window
        _signed_at.clear()


def _within_quota() -> bool:
    import time

    quota = _sign_quota[0]
    if quota is None:
        return True
    now = time.monotonic()
    with _quota_lock:
        _signed_at[:] = [at for at in _signed_at if now - at < _sign_window[0]]
        if len(_signed_at) >= quota:
            return False
        _signed_at.append(now)
        return True


def _kms_sign_quota() -> None:
    from moto.core.exceptions import JsonRESTError
    from moto.kms.responses import KmsResponse

    original = KmsResponse.sign

    @functools.wraps(original)
    def sign(self: Any) -> str:
        if not _within_quota():
            # As KMS words it (HTTP 400, the error type in the body): botocore reads it as a throttle.
            raise JsonRESTError("ThrottlingException", "Rate exceeded")
        return str(original(self))

    KmsResponse.sign = sign  # type: ignore[method-assign]


# --- applying them --------------------------------------------------------------------------------

# In the order they are applied: the rollback wraps moto's transaction first, so that the atomicity
# lock, applied next, holds the rollback too.
PATCHES: dict[str, Callable[[], None]] = {
    "transaction_rollback": _transaction_rollback,
    "request_atomicity": _request_atomicity,
    "stream_iterators": _stream_iterators,
    "kms_message_type": _kms_message_type,
    "kms_sign_quota": _kms_sign_quota,
}
_applied: list[str] = []
_applying = threading.Lock()


def apply() -> None:
    """Check moto's version, then correct it (once per process: moto's classes are shared)."""
    check_moto_version(importlib.metadata.version("moto"))
    with _applying:
        if _applied:
            return
        for name, patch in PATCHES.items():
            patch()
            _applied.append(name)


def applied() -> tuple[str, ...]:
    return tuple(_applied)
