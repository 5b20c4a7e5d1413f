"""Requests as API Gateway would deliver them: operator routes through the real authorizer and the
route's function (`call`), joins and renewals with no authorizer (`join`), and the Joinplane-Proof a
hand-rolled client signs with the openssl CLI (`sign_proof`)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .functions import load_function, route_handler
from .lambda_context import LambdaContext, http_event


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)  # as the function answered them

    @property
    def code(self) -> str | None:
        return self.body.get("error", {}).get("code") if isinstance(self.body, dict) else None

    @property
    def reason(self) -> str | None:
        """The refusal's reason: the operator envelope's, or the join dialect's ErrorInfo's."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return self.body["error"].get("reason")
        info = self.error_info
        return None if info is None else info["reason"]

    @property
    def metadata(self) -> dict[str, str]:
        """The join dialect's ErrorInfo metadata (empty when there is none)."""
        info = self.error_info
        return {} if info is None else dict(info["metadata"])

    @property
    def error_info(self) -> dict[str, Any] | None:
        """The one google.rpc.ErrorInfo of an rpcStatus, if there is one."""
        details = self.body.get("details", []) if isinstance(self.body, dict) else []
        infos = [d for d in details if d.get("@type") == "type.googleapis.com/google.rpc.ErrorInfo"]
        assert len(infos) <= 1, self.body
        return infos[0] if infos else None


def key_id_of(secret: str) -> str:
    """The id of an API key (`key_...`) from its secret: what events and records name it by."""
    from joinplane import credentials, keyauth

    parsed = credentials.parse(secret, keyauth.SECRET_PREFIX)
    assert parsed is not None
    return f"{keyauth.ID_PREFIX}_{parsed.ulid}"


def call(path: str, body: Any, key: str | None, *, raw: bytes | None = None) -> Reply:
    """An operator route through the authorizer and the route's function, as API Gateway would."""
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    authorizer = load_function("authorizer").lambda_handler(http_event(path, b"", headers), LambdaContext())
    assert authorizer["isAuthorized"] is True
    payload = raw if raw is not None else json.dumps(body).encode()
    event = http_event(path, payload, headers, authorizer=authorizer["context"])
    result = route_handler(path)(event, LambdaContext())
    return Reply(result["statusCode"], json.loads(result["body"]) if result.get("body") else None)


_last_proof_ms = 0
_proof_lock = threading.Lock()


def sign_proof(
    key_path: Path,
    *,
    purpose: str,
    credential: str,
    body: bytes,
    timestamp_ms: int | None = None,
    public_key: Path | None = None,
    new_key: Path | None = None,
) -> str:
    """A `Joinplane-Proof` header value made as a hand-rolled client would: the README's printf,
    signed by the openssl CLI with the machine's key file. `public_key` sends that key's SPKI as
    `key=`; `new_key` (a renewal that rotates keys) adds the new key's signature as `csrsig=`."""
    global _last_proof_ms
    if timestamp_ms is None:
        # Like a real client's clock: a later proof of this process is never older than an earlier one
        with _proof_lock:
            _last_proof_ms = timestamp_ms = max(int(time.time() * 1000), _last_proof_ms + 1)
    message = (
        f"joinplane-proof-v1\n{purpose}\n{timestamp_ms}\n{hashlib.sha256(credential.encode()).hexdigest()}\n"
        f"{hashlib.sha256(body).hexdigest()}\n"
    ).encode()
    header = f"t={timestamp_ms},sig={_openssl_sign(key_path, message)}"
    if public_key is not None:
        spki = subprocess.run(
            ["openssl", "pkey", "-in", str(public_key), "-pubout", "-outform", "DER"],
            capture_output=True,
            check=True,
        ).stdout
        header += f",key={base64.b64encode(spki).decode()}"
    if new_key is not None:
        header += f",csrsig={_openssl_sign(new_key, message)}"
    return header


def _openssl_sign(key_path: Path, message: bytes) -> str:
    kind = subprocess.run(
        ["openssl", "pkey", "-in", str(key_path), "-noout", "-text"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    signed = key_path.with_name(f"proof-{uuid.uuid4().hex}.txt")
    signed.write_bytes(message)
    try:
        if "ED25519" in kind.upper().split("\n", 1)[0]:
            # openssl 3.0 signs Ed25519 only from a file ("oneshot"), never from stdin
            command = ["openssl", "pkeyutl", "-sign", "-inkey", str(key_path), "-rawin", "-in", str(signed)]
        else:
            command = ["openssl", "dgst", "-sha256", "-sign", str(key_path), str(signed)]
        return base64.b64encode(subprocess.run(command, capture_output=True, check=True).stdout).decode()
    finally:
        signed.unlink()


def join(
    body: Any,
    *,
    bearer: str | None = None,
    raw: bytes | None = None,
    path: str = "/machines/join",
    signed_by: Path | None = None,
    proof: str | None = None,
    source_ip: str = "127.0.0.1",
    remaining_millis: int = 10_000,
) -> Reply:
    """POST /machines/join (or /machines/renew) as API Gateway would deliver it: no authorizer,
    from `source_ip`.

    `signed_by` (a machine's key file) adds a fresh Joinplane-Proof for exactly this request;
    `proof` sends a given header value as it is (a replay); `remaining_millis` is the time the
    invocation has left."""
    headers = {"authorization": f"Bearer {bearer}"} if bearer is not None else {}
    payload = raw if raw is not None else json.dumps(body).encode()
    if signed_by is not None:
        renewing = path.endswith("/renew")
        # An AWS IAM join names its token by id, and the proof signs that id.
        named = ((body or {}).get("awsIam") or {}).get("tokenId")
        credential = (body or {}).get("machineToken" if renewing else "joinToken") or named or bearer or ""
        proof = sign_proof(
            signed_by, purpose="renew" if renewing else "join", credential=credential, body=payload
        )
    if proof is not None:
        headers["joinplane-proof"] = proof
    event = http_event(path, payload, headers, source_ip=source_ip)
    result = route_handler(path)(event, LambdaContext(remaining_millis=remaining_millis))
    body = json.loads(result["body"]) if result.get("body") else None
    return Reply(result["statusCode"], body, dict(result.get("headers") or {}))
