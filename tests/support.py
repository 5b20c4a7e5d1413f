"""Test helpers: load a function as Lambda would, and call operator routes through the real
authorizer and handler with API Gateway HTTP API (payload 2.0) events."""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from joinplane import routes
from joinplane_local.functions import FunctionSpec, specs_from_template
from joinplane_local.template import Template, load

ROOT = Path(__file__).resolve().parents[1]
_loaded: dict[str, ModuleType] = {}


@functools.cache
def function_specs() -> dict[str, FunctionSpec]:
    """The template's functions by logical id: folder (CodeUri), handler module and attribute."""
    return specs_from_template(Template(load()))


def load_function(name: str) -> ModuleType:
    """A function's handler module, by logical id (`PoolsFunction`) or by its folder under
    functions/ (`pools`), imported under a unique module name (every handler file is app.py)."""
    specs = function_specs()
    spec = specs.get(name) or next(s for s in specs.values() if s.code_dir == ROOT / "functions" / name)
    if spec.logical_id not in _loaded:
        found = importlib.util.spec_from_file_location(f"fn_{spec.code_dir.name}", spec.module_file)
        assert found and found.loader
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        _loaded[spec.logical_id] = module
    return _loaded[spec.logical_id]


def function_of(path: str, method: str = "POST") -> str:
    """The logical id of the function the route table gives `method path`. A path the table
    lacks goes to the function serving its siblings (`pools/destroy`: the pools function), to see
    what a function answers for a route it does not serve."""
    try:
        return routes.at(method, path).function
    except LookupError:
        parent = path.rsplit("/", 1)[0] + "/"
        return next(route.function for route in routes.ROUTES if route.path.startswith(parent))


def route_handler(path: str, method: str = "POST") -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """The Lambda handler of the function that serves `method path`."""
    function = function_specs()[function_of(path, method)]
    handler: Callable[[dict[str, Any], Any], dict[str, Any]] = getattr(
        load_function(function.logical_id), function.handler_attr
    )
    return handler


@dataclass
class LambdaContext:
    function_name: str = "test"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test"
    aws_request_id: str = ""
    remaining_millis: int = 10_000  # what the invocation has left (a small value: nearly out of time)

    def __post_init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_millis


def http_event(
    path: str,
    body: bytes | str,
    headers: dict[str, str] | None = None,
    authorizer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else body.encode()
    try:
        text, encoded = raw.decode(), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(raw).decode(), True
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": f"POST {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", **{k.lower(): v for k, v in (headers or {}).items()}},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
            "http": {
                "method": "POST",
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "pytest",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"POST {path}",
            "stage": "$default",
            "time": "30/Nov/2026:00:00:00 +0000",
            "timeEpoch": 0,
        },
        "body": text,
        "isBase64Encoded": encoded,
    }
    if authorizer is not None:
        event["requestContext"]["authorizer"] = {"lambda": authorizer}
    return event


@dataclass
class Reply:
    status: int
    body: Any

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
) -> Reply:
    """POST /machines/join (or /machines/renew) as API Gateway would deliver it: no authorizer.

    `signed_by` (a machine's key file) adds a fresh Joinplane-Proof for exactly this request;
    `proof` sends a given header value as it is (a replay)."""
    headers = {"authorization": f"Bearer {bearer}"} if bearer is not None else {}
    payload = raw if raw is not None else json.dumps(body).encode()
    if signed_by is not None:
        renewing = path.endswith("/renew")
        credential = (body or {}).get("machineToken" if renewing else "joinToken") or bearer or ""
        proof = sign_proof(
            signed_by, purpose="renew" if renewing else "join", credential=credential, body=payload
        )
    if proof is not None:
        headers["joinplane-proof"] = proof
    result = route_handler(path)(http_event(path, payload, headers), LambdaContext())
    return Reply(result["statusCode"], json.loads(result["body"]) if result.get("body") else None)


def release_together(
    work: Callable[[int], Any], threads: int, *, catch: type[Exception] | None = None
) -> list[Any]:
    """Run work(0..threads-1) on threads held at a barrier and released at once: the race harness of
    every concurrency test. With `catch`, such an exception becomes that thread's result."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except Exception as error:
            if catch is None or not isinstance(error, catch):
                raise
            results[index] = error

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def openssl_csr(directory: Path, subject: str = "/CN=test") -> str:
    """A P-256 key and CSR made with the openssl CLI, as a real client makes them."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "openssl",
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            str(directory / "key.pem"),
            "-out",
            str(directory / "csr.pem"),
        ],
        check=True,
        capture_output=True,
    )
    return (directory / "csr.pem").read_text()
