"""What the tests share, in one place: every test imports its helpers from here (or gets them from a
conftest fixture), never from another test module.

- functions: the project's Lambda functions, found through the route table (`load_function`)
- lambda_context: the Lambda context and API Gateway payload 2.0 events (`http_event`)
- http: operator routes and joins through the real handlers (`call`, `join`, `sign_proof`, `key_id_of`)
- csr: keys and CSRs made by the openssl CLI, by kind (`make_csr`, `openssl_csr`)
- races: threads released together against the moto server (`release_together`)
- polling: waiting for work on another thread or process (`wait_until`)
- runtime: the one way to start joinplane_local (`local_runtime`)
- overload: a crowd of machines joining one pool at once over HTTP (`join_together`)
- requirements: the pinned requirement files, includes followed (`pins`)
- import_guard: a module run with only one requirement file's distributions importable (a script)
- servers: stand-in HTTP servers for the CLI (`serving`)
- iam: the functions' emulated IAM (`refusals`, `policies`)
"""

from .csr import CsrFile, csr_for_key, make_csr, openssl_csr
from .functions import ROOT, function_of, function_specs, load_function, route_handler
from .http import Reply, call, join, key_id_of, sign_proof
from .lambda_context import LambdaContext, http_event
from .polling import wait_until
from .races import release_together
from .servers import recording, serving

__all__ = [
    "ROOT",
    "CsrFile",
    "LambdaContext",
    "Reply",
    "call",
    "csr_for_key",
    "function_of",
    "function_specs",
    "http_event",
    "join",
    "key_id_of",
    "load_function",
    "make_csr",
    "openssl_csr",
    "recording",
    "release_together",
    "route_handler",
    "serving",
    "sign_proof",
    "wait_until",
]
