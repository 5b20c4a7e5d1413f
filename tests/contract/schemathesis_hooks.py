"""schemathesis hooks for the contract test (loaded by the schemathesis process, `hooks = ...`).

One thing a JSON Schema cannot promise: that `ekCertificatePem`'s base64 is a DER X.509
certificate (and `certificatePem`'s a CA's). The document says so in words and pins the PEM shape;
for schema-valid (positive) requests this hook puts a real certificate (made by openssl for the
test, path in JOINPLANE_CONTRACT_EK_PEM; the manufacturer root of the document's own example) in
place of the generated base64, so that such a request is judged on everything else. Negative
requests are sent as generated.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import schemathesis
from schemathesis.generation import GenerationMode

from joinplane.routes import EXAMPLE_TPM_ROOT

_PEM = Path(os.environ["JOINPLANE_CONTRACT_EK_PEM"]).read_text()


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    meta = case.meta
    positive = meta is not None and meta.generation.mode == GenerationMode.POSITIVE
    body = case.body
    if positive and isinstance(body, dict) and isinstance(body.get("ekCertificatePem"), str):
        case.body = {**body, "ekCertificatePem": _PEM}
    if positive and isinstance(body, dict) and isinstance(body.get("certificatePem"), str):
        case.body = {**body, "certificatePem": EXAMPLE_TPM_ROOT}
