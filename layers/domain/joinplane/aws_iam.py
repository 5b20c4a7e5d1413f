"""The AWS IAM join method (docs/aws.md): a machine proves its IAM identity with no shared secret.

The machine signs, with its own AWS credentials (SigV4), an `sts:GetCallerIdentity` request and
sends it in its join (`awsIam`: the token's id, the signed headers, the body) instead of a join
token's secret. Only STS can check the signature, so the join forwards the request to STS and reads
the caller's account, ARN and user id from the answer. Everything STS does not check is checked here,
before anything is sent, and refused with nothing sent:

- **shape**: a POST of exactly `Action=GetCallerIdentity&Version=2011-06-15`, form-encoded, with
  only the headers SigV4 and this method need, each of them signed (so STS vouches for every
  header it receives), for the `sts` service of the host's own region;
- **host**: the `Host` the request was signed for is an STS endpoint of the allow-list (regional
  and FIPS hosts of AWS's partitions), or the one the deployment configures. The URL is built here
  from that host: nothing of the request names where it goes. Anything under `amazonaws.com` would
  not do: S3 buckets and other customer content live there too;
- **binding**: the signed `X-Joinplane-Join-Binding` header names the SHA-256 of the CSR's public
  key and a time in Unix milliseconds. A request signed for one key is worth nothing with another
  (the join's mandatory proof of possession shows the key is held), and one signed for another
  service (Vault's or Teleport's IAM methods) lacks the header;
- **freshness**: the binding's time is within the proof of possession's window (300 s old, 60 s
  ahead); STS itself refuses a signature older than 15 minutes.

The forward is the join's only outbound call: HTTPS to the host built above (or the configured
endpoint: a VPC's STS interface endpoint, or the local runtime's emulator), a strict timeout,
redirects never followed, no proxy, and an answer of at most 16 KiB.
"""

from __future__ import annotations

import http.client
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, NamedTuple

from joinplane import clock, deadline, errors, observe, proof, settings
from joinplane.aws_rules import ACCOUNT, ARN, Caller
from joinplane.errors import InvalidArgument, Unauthenticated, Unavailable

if TYPE_CHECKING:
    from joinplane.dal.tokens import JoinTokenRecord
    from joinplane.join_wire import AwsIam, JoinMachineRequest

BINDING_HEADER = "x-joinplane-join-binding"
BODY = {"Action": "GetCallerIdentity", "Version": "2011-06-15"}
CONTENT_TYPE = re.compile(r"application/x-www-form-urlencoded(?:; ?charset=utf-8)?", re.IGNORECASE)
# Every header a signed GetCallerIdentity may carry: anything else is refused, so no header the
# machine chose reaches STS unsigned or unread.
REQUIRED = frozenset({"authorization", "host", "x-amz-date", BINDING_HEADER})
OPTIONAL = frozenset({"x-amz-security-token", "content-type"})
TIMEOUT_SECONDS = 3.0
MAX_ANSWER_BYTES = 16 * 1024

# STS's regional endpoints, by partition (AWS General Reference, "AWS STS endpoints"). A region
# AWS opens later is added here, or reached through the deployment's own endpoint meanwhile.
COMMERCIAL = (
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
)
GOVCLOUD = ("us-gov-east-1", "us-gov-west-1")
CHINA = ("cn-north-1", "cn-northwest-1")
FIPS = ("us-east-1", "us-east-2", "us-west-1", "us-west-2", *GOVCLOUD)


def _allow_list() -> dict[str, str]:
    """Each allowed host, and the region its requests are signed for."""
    hosts = {"sts.amazonaws.com": "us-east-1"}  # the global endpoint signs for us-east-1
    hosts.update({f"sts.{region}.amazonaws.com": region for region in (*COMMERCIAL, *GOVCLOUD)})
    hosts.update({f"sts.{region}.amazonaws.com.cn": region for region in CHINA})
    hosts.update({f"sts-fips.{region}.amazonaws.com": region for region in FIPS})
    return hosts


ALLOWED_HOSTS = _allow_list()

MALFORMED = "awsIam must be a signed sts:GetCallerIdentity request"
REFUSED = "join token refused (unknown, malformed, revoked, expired or used up)"


class SignedRequest(NamedTuple):
    """A signed request that passed the shape and host checks: what is forwarded, and its binding."""

    host: str
    headers: tuple[tuple[str, str], ...]  # every header as sent (all signed), Authorization too
    body: bytes
    binding_key_sha256: str
    binding_ms: int


def _invalid(why: str) -> InvalidArgument:
    return InvalidArgument(f"{MALFORMED}: {why}", reason=errors.AWS_REQUEST_INVALID)


# --- the token ---------------------------------------------------------------------------------


def token(request: JoinMachineRequest, authorization: str) -> tuple[JoinTokenRecord, str]:
    """The token the join names by id (no secret), and the credential its proof signs: the id.
    A token without AWS rules takes no IAM join, and is refused as an unknown one is."""
    from joinplane import credentials
    from joinplane.dal import tokens as tokens_db

    presented = request.awsIam
    assert presented is not None
    if request.joinToken or credentials.bearer(authorization):
        raise InvalidArgument("an AWS IAM join names its token in awsIam.tokenId: send no join token secret")
    token_id = presented.tokenId
    if not re.fullmatch(rf"{tokens_db.ID_PREFIX}_[0-9a-hjkmnp-tv-z]{{26}}", token_id):
        raise InvalidArgument("awsIam.tokenId must be a join token's id, jtok_...")
    found = tokens_db.get(token_id)
    if found is None or found.state != "active" or found.attestation.aws is None:
        observe.note(presentedTokenId=token_id, credentialRefusal="unknown" if found is None else "not-aws")
        raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
    return found, token_id


# --- shape and host ----------------------------------------------------------------------------


def _authorization(value: str) -> tuple[str, str, frozenset[str]]:
    """`AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request,
    SignedHeaders=<a;b;c>, Signature=<hex>` → (scope date, scope region, signed header names)."""
    algorithm, _, rest = value.partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        raise _invalid("Authorization must be AWS4-HMAC-SHA256 (SigV4)")
    parts: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, text = part.strip().partition("=")
        if not sep or name not in ("Credential", "SignedHeaders", "Signature") or name in parts:
            raise _invalid("Authorization must have Credential, SignedHeaders and Signature once each")
        parts[name] = text
    if parts.keys() != {"Credential", "SignedHeaders", "Signature"}:
        raise _invalid("Authorization must have Credential, SignedHeaders and Signature once each")
    scope = parts["Credential"].split("/")
    if len(scope) != 5 or not re.fullmatch(r"[A-Z0-9]{16,128}", scope[0]) or scope[4] != "aws4_request":
        raise _invalid("Authorization's Credential is not <access key>/<date>/<region>/sts/aws4_request")
    if scope[3] != "sts":
        raise _invalid(f"the request is signed for the service {scope[3]!r}, not sts")
    if not re.fullmatch(r"[0-9a-f]{64}", parts["Signature"]):
        raise _invalid("Authorization's Signature is not 64 hex digits")
    return scope[1], scope[2], frozenset(parts["SignedHeaders"].split(";"))


def _binding(value: str) -> tuple[str, int]:
    """`t=<unix ms>,spki=<sha256 hex of the CSR's SubjectPublicKeyInfo>` → (spki, t)."""
    match = re.fullmatch(r"t=([0-9]{13}),spki=([0-9a-f]{64})", value)
    if match is None:
        raise _invalid(f"{BINDING_HEADER} must be t=<unix ms>,spki=<sha256 hex of the csr's public key>")
    return match.group(2), int(match.group(1))


def _body(text: str) -> bytes:
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise _invalid("the body is not form-encoded") from None
    if len(pairs) != len(BODY) or dict(pairs) != BODY:
        raise _invalid("the body must be Action=GetCallerIdentity&Version=2011-06-15 and nothing else")
    return text.encode()


def parse(presented: AwsIam, configured_host: str = "") -> SignedRequest:
    """The checks made before anything is sent: the request's shape, its host, what is signed."""
    headers: dict[str, tuple[str, str]] = {}
    for name, value in presented.headers.items():
        lower = name.lower()
        if lower in headers:
            raise _invalid(f"the header {lower} is given twice")
        if lower not in REQUIRED | OPTIONAL:
            raise _invalid(f"the header {name} is not one a signed GetCallerIdentity carries")
        headers[lower] = (name, value)
    missing = sorted(REQUIRED - headers.keys())
    if missing:
        raise _invalid(f"the header {missing[0]} is missing")
    host = headers["host"][1].lower()
    if host in ALLOWED_HOSTS:
        region = ALLOWED_HOSTS[host]
    elif configured_host and host == configured_host:
        region = ""  # the deployment's own endpoint: whichever region it serves
    else:
        raise _invalid(f"{host!r} is not an STS endpoint this deployment sends to")
    date, scope_region, signed = _authorization(headers["authorization"][1])
    if region and scope_region != region:
        raise _invalid(f"the request is signed for the region {scope_region!r}, not {host}'s")
    amz_date = headers["x-amz-date"][1]
    if not re.fullmatch(r"[0-9]{8}T[0-9]{6}Z", amz_date) or amz_date[:8] != date:
        raise _invalid("X-Amz-Date must be <yyyymmdd>T<hhmmss>Z of the Credential's date")
    unsigned = sorted(headers.keys() - {"authorization"} - signed)
    if unsigned:
        raise _invalid(f"the header {unsigned[0]} must be signed (in SignedHeaders)")
    absent = sorted(signed - headers.keys())
    if absent:
        raise _invalid(f"SignedHeaders names {absent[0]}, which is not sent")
    if "content-type" in headers and not CONTENT_TYPE.fullmatch(headers["content-type"][1]):
        raise _invalid("Content-Type must be application/x-www-form-urlencoded")
    spki, binding_ms = _binding(headers[BINDING_HEADER][1])
    return SignedRequest(
        host=host,
        headers=tuple(headers.values()),
        body=_body(presented.body),
        binding_key_sha256=spki,
        binding_ms=binding_ms,
    )


def check_binding(signed: SignedRequest, identity: str, now_ms: int) -> None:
    """The signed request was made for this join's key, within the proof's window."""
    if signed.binding_key_sha256 != identity:
        raise Unauthenticated(
            f"the signed request's {BINDING_HEADER} names another key than the csr's",
            reason=errors.AWS_BINDING_INVALID,
        )
    if not now_ms - proof.WINDOW_MS <= signed.binding_ms <= now_ms + proof.FUTURE_SKEW_MS:
        raise Unauthenticated(
            f"the signed request's {BINDING_HEADER} time is too old or from the future (check the clock)",
            reason=errors.AWS_REQUEST_STALE,
            metadata={"serverTime": str(now_ms)},
        )


# --- the forward -------------------------------------------------------------------------------


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx surfaces as an HTTPError, never as a request elsewhere


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())


def target(signed: SignedRequest, endpoint_url: str) -> str:
    """Where the request goes: the deployment's endpoint, else the allow-listed host it names."""
    return endpoint_url.rstrip("/") + "/" if endpoint_url else f"https://{signed.host}/"


# STS's answers that say "not now" rather than "not you": a fleet booting at once is throttled, and
# must be told to retry (503), never that its identity was rejected (which the agent takes as final).
RETRYABLE = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded", "ServiceUnavailable"})


def _exchange(outbound: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    """STS's status and (bounded) answer; urllib's and http.client's failures are raised as they are."""
    try:
        with _OPENER.open(outbound, timeout=timeout) as answer:
            return answer.status, answer.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as failed:
        with failed:
            return failed.code, failed.read(MAX_ANSWER_BYTES + 1)


def forward(signed: SignedRequest, endpoint_url: str = "") -> Caller:
    """Send the request to STS and read who signed it; STS's refusal is the caller's."""
    outbound = urllib.request.Request(  # noqa: S310 - https to an allow-listed host, or the deployment's
        target(signed, endpoint_url), data=signed.body, headers=dict(signed.headers), method="POST"
    )
    # Never past the invocation's end: what is left after the forward must still decide and commit.
    deadline.check(deadline.DEFAULT_RESERVE + 0.1)
    timeout = min(TIMEOUT_SECONDS, deadline.remaining() - deadline.DEFAULT_RESERVE)
    # urllib's timeout bounds each socket operation, not the exchange: an answer trickled a byte at
    # a time would outlast it many times over. The exchange runs beside the invocation, which waits
    # for it no longer than the timeout (a thread left behind ends at its next socket timeout).
    outcome: list[tuple[int, bytes] | BaseException] = []

    def exchange() -> None:
        try:
            outcome.append(_exchange(outbound, timeout))
        except BaseException as failed:  # handed to the invocation's thread, which raises it
            outcome.append(failed)

    worker = threading.Thread(target=exchange, name="sts-forward", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        observe.note(stsUnreachable=f"no answer within {timeout:.1f} s")
        raise Unavailable("STS did not answer in time; retry")
    result = outcome[0]
    if isinstance(result, urllib.error.URLError | OSError | http.client.HTTPException):
        observe.note(stsUnreachable=str(getattr(result, "reason", result))[:200])
        raise Unavailable("STS could not be reached; retry") from None
    if isinstance(result, BaseException):
        raise result
    status, raw = result
    if status >= 300:
        code = _error_code(raw[:MAX_ANSWER_BYTES])
        observe.note(stsRefusal=code or str(status))
        if 400 <= status < 500 and status != 429 and code not in RETRYABLE:
            raise Unauthenticated(
                f"STS refused the signed request ({code or status})", reason=errors.AWS_IDENTITY_REJECTED
            )
        raise Unavailable(f"STS answered {code or status}; retry")
    if len(raw) > MAX_ANSWER_BYTES:
        raise Unavailable("STS's answer is too large to be GetCallerIdentity's; retry")
    return caller_of(raw)


def _error_code(raw: bytes) -> str:
    match = re.search(rb"<Code>([A-Za-z.]{1,64})</Code>", raw)
    return match.group(1).decode() if match else ""


def caller_of(raw: bytes) -> Caller:
    """GetCallerIdentityResult's Account, Arn and UserId, checked for shape and for agreeing."""
    from xml.etree import ElementTree

    try:
        document = ElementTree.fromstring(raw)  # noqa: S314 - bounded answer of an allow-listed host
    except ElementTree.ParseError:
        raise Unavailable("STS's answer is not XML; retry") from None
    found: dict[str, str] = {}
    for element in document.iter():
        name = element.tag.rsplit("}", 1)[-1]
        if name in ("Account", "Arn", "UserId"):
            found[name] = (element.text or "").strip()
    account, arn, user_id = found.get("Account", ""), found.get("Arn", ""), found.get("UserId", "")
    arn_match = ARN.fullmatch(arn)
    if not ACCOUNT.fullmatch(account) or arn_match is None or arn_match.group(1) != account:
        raise Unavailable("STS's answer names no caller; retry")
    if not re.fullmatch(r"[\x21-\x7e]{1,256}", user_id):
        raise Unavailable("STS's answer names no caller; retry")
    return Caller(account, arn, user_id)


# --- the join's step ---------------------------------------------------------------------------


def verify(presented: AwsIam, csr: Any, proof_ms: int | None) -> Caller:
    """Who the machine is in AWS, for this join's key: every check here, then STS's answer."""
    if csr is None:
        raise InvalidArgument("an AWS IAM join needs a csr: the signed request is bound to its key")
    if proof_ms is None:
        # The binding names a public key; only the proof shows the caller holds it.
        raise Unauthenticated(
            "an AWS IAM join needs a Joinplane-Proof made with the csr's key", reason=errors.PROOF_REQUIRED
        )
    configured = settings.settings().sts_endpoint_url
    signed = parse(presented, urllib.parse.urlsplit(configured).netloc.lower() if configured else "")
    check_binding(signed, str(csr.public_key_sha256), int(clock.epoch() * 1000))
    caller = forward(signed, configured)
    observe.note(awsAccount=caller.account, awsArn=caller.arn)
    return caller
