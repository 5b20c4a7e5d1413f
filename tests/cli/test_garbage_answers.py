"""`joinplane` against a server that answers garbage: a 200 that is not what the API promises, JSON
Python cannot read, a body that breaks off. Every such answer ends in one plain line on stderr and
a non-zero exit, and nothing is written to `--dir` that the machine could not use."""

from __future__ import annotations

import datetime
import http.server
import io
import json
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from joinplane import errors, join_wire
from joinplane_cli import agent, main, service, statedir
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.keys import MachineKey
from tests.support import serving, wait_until

MACHINE_ID = "mach_01m8p07pmqayq5j17a974pa5nd"
MACHINE_TOKEN = "jpm_01m8p07pmqayq5j17a974pa5nd_0123456789abcdefghjkmnpqrstvwxyz"
EXPIRES_AT = "2030-01-02T03:04:05Z"


# --- a server that says whatever the test wants ------------------------------------------------


@dataclass
class Reply:
    status: int
    body: bytes
    length: int | None = None  # a Content-Length beyond the body: the answer breaks off


Answer = Reply | Callable[[dict[str, Any]], Reply]


@dataclass
class FakeServer:
    url: str = ""
    answers: list[Answer] = field(default_factory=list)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def answer(self, *answers: Answer) -> None:
        """Answer in this order; the last answer is repeated."""
        self.answers = list(answers)

    def next(self, path: str, request: dict[str, Any]) -> Reply:
        self.requests.append((path, request))
        chosen = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return chosen(request) if callable(chosen) else chosen


def reply(status: int, document: Any) -> Reply:
    return Reply(status, json.dumps(document).encode())


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            answer = fake.next(self.path, json.loads(raw or b"{}"))
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(answer.length or len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        fake.url = url
        yield fake


# --- certificates as a real pool CA issues them --------------------------------------------------

_CA_KEY = ec.generate_private_key(ec.SECP256R1())
_CA_NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test pool CA")])
_NOW = datetime.datetime.now(datetime.UTC)


def _certificate(public_key: Any, subject: x509.Name, *, days: int = 1) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(_CA_NAME)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(minutes=5))
        .not_valid_after(_NOW + datetime.timedelta(days=days))
        .sign(_CA_KEY, hashes.SHA256())
    )


CA_PEM = (
    _certificate(_CA_KEY.public_key(), _CA_NAME, days=30).public_bytes(serialization.Encoding.PEM).decode()
)


def issue(csr_pem: str) -> str:
    """A certificate for the key of `csr_pem`, signed by the test CA."""
    request = x509.load_pem_x509_csr(csr_pem.encode())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, MACHINE_ID)])
    return _certificate(request.public_key(), subject).public_bytes(serialization.Encoding.PEM).decode()


def _public(holder: Any) -> bytes:
    """The SubjectPublicKeyInfo of a certificate or a private key."""
    public_key = holder.public_key()
    return bytes(
        public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def other_certificate() -> str:
    """A well-formed certificate, for a key that is not the machine's."""
    return issue(MachineKey.generate().csr("someone else"))


def admission(request: dict[str, Any], **changes: Any) -> Reply:
    body = {
        "ok": True,
        "errMsg": "",
        "workspaceId": "ws-1",
        "poolName": "gpu-rack-1",
        "machineId": MACHINE_ID,
        "machineToken": MACHINE_TOKEN,
        "bootstrap": {"workspaceId": "ws-1", "poolName": "gpu-rack-1"},
        "certificate": issue(request["csr"]),
        "caCertificates": CA_PEM,
        "certificateExpiresAt": EXPIRES_AT,
        "schedulable": True,
        "joinRequest": None,
        "retryAfterSeconds": 0,
    }
    body.update(changes)
    return reply(200, body)


def renewal(request: dict[str, Any], **changes: Any) -> Reply:
    body = {
        "machineId": MACHINE_ID,
        "certificate": issue(request["csr"]),
        "caCertificates": CA_PEM,
        "certificateExpiresAt": EXPIRES_AT,
    }
    body.update(changes)
    return reply(200, body)


# --- the machine's directory -------------------------------------------------------------------


def joined_directory(parent: Path, url: str, machine: Any = None) -> Path:
    """What `join` leaves behind for an admitted machine."""
    directory = parent / "machine"
    key = MachineKey.generate()
    csr = key.csr(MACHINE_ID)
    record = {"machineId": MACHINE_ID, "url": url, "certificateExpiresAt": "2029-01-01T00:00:00Z"}
    files: dict[str, str | bytes] = {
        statedir.KEY: key.pem(),
        statedir.CSR: csr,
        statedir.CERTIFICATE: issue(csr),
        statedir.CA: CA_PEM,
        statedir.BOOTSTRAP: "{}\n",
        statedir.TOKEN: MACHINE_TOKEN + "\n",
        statedir.MACHINE: json.dumps(record if machine is None else machine) + "\n",
    }
    statedir.commit(directory, {name: statedir.content(name, data) for name, data in files.items()})
    return directory


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in and beside DIR (a commit's leftovers would show), with its mode."""
    return {
        str(path.relative_to(directory.parent)): (path.read_bytes(), path.stat().st_mode)
        for path in sorted(directory.parent.rglob("*"))
        if path.is_file() and not path.name.endswith(".lock")
    }


def plain_failure(code: int, err: str, expected: Exit = Exit.ERROR) -> str:
    """The one line a failure prints (a traceback would have escaped `main` already)."""
    assert code == expected, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("joinplane: "), err
    return lines[0]


def run(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def operator(server: FakeServer, *args: str) -> list[str]:
    return [*args, "--url", server.url, "--api-key", "jpk_x", "--tenant", "t", "--pool", "p"]


# --- renew ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(None, id="an empty object"),
        pytest.param({"certificate": ""}, id="no certificate"),
        pytest.param(
            {"certificate": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}, id="bad PEM"
        ),
        pytest.param({"certificate": "other key"}, id="a certificate for another key"),
        pytest.param({"caCertificates": 5}, id="caCertificates not PEM"),
        pytest.param({"machineId": {"a": 1}}, id="machineId not a string"),
        pytest.param({"machineId": "mach_01someoneelse"}, id="another machine's id"),
    ],
)
@pytest.mark.parametrize("rotate", [True, False], ids=["rotate-key", "same key"])
def test_an_unusable_renewal_leaves_the_directory_exactly_as_it_was(
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    changes: dict[str, Any] | None,
    rotate: bool,
) -> None:
    # Given a joined machine, and a server whose 200 is not a usable renewal
    directory = joined_directory(tmp_path, server.url)
    before = snapshot(directory)
    if changes is None:
        server.answer(reply(200, {}))
    elif changes.get("certificate") == "other key":
        server.answer(lambda request: renewal(request, certificate=other_certificate()))
    else:
        server.answer(lambda request: renewal(request, **changes))

    # When
    code, out, err = run(
        "renew", "--dir", str(directory), *(["--rotate-key"] if rotate else []), capsys=capsys
    )

    # Then it fails plainly, and the certificate, the CA and the key the machine had are all still there
    line = plain_failure(code, err)
    assert "renewal answer is unusable" in line and "left as it was" in line
    assert "Renewed" not in out
    assert snapshot(directory) == before


def test_a_usable_renewal_with_a_new_key_is_recorded(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a joined machine and a server that renews properly, without certificateExpiresAt
    directory = joined_directory(tmp_path, server.url)
    old_key = (directory / statedir.KEY).read_bytes()
    server.answer(lambda request: renewal(request, certificateExpiresAt=None))

    # When
    code, out, err = run("renew", "--dir", str(directory), "--rotate-key", capsys=capsys)

    # Then the new certificate is for the new key, and its expiry comes from the certificate itself
    assert code == Exit.OK, err
    assert f"Renewed the certificate of {MACHINE_ID}" in out
    key = MachineKey.load((directory / statedir.KEY).read_bytes())
    assert (directory / statedir.KEY).read_bytes() != old_key
    assert _public(
        x509.load_pem_x509_certificate((directory / statedir.CERTIFICATE).read_bytes())
    ) == _public(key.key)
    expires = json.loads((directory / statedir.MACHINE).read_text())["certificateExpiresAt"]
    assert expires.startswith((_NOW + datetime.timedelta(days=1)).strftime("%Y-%m-%d"))


def test_a_machine_json_that_is_not_an_object_does_not_stop_a_renewal(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a machine.json holding a JSON list
    directory = joined_directory(tmp_path, server.url, machine=[])
    server.answer(renewal)

    # When
    code, _, err = run("renew", "--dir", str(directory), "--url", server.url, capsys=capsys)

    # Then it is read as empty, and rewritten whole
    assert code == Exit.OK, err
    assert json.loads((directory / statedir.MACHINE).read_text())["machineId"] == MACHINE_ID


# --- join ----------------------------------------------------------------------------------------


def _join(server: FakeServer, directory: Path, *extra: str) -> list[str]:
    return ["join", "--url", server.url, "--token", "jpt_x", "--dir", str(directory), *extra]


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(
            {"machineId": {"a": 1}, "certificate": 5, "bootstrap": "x", "certificateExpiresAt": []},
            id="the reviewer's garbage",
        ),
        pytest.param({"machineToken": ""}, id="no machine token"),
        pytest.param({"machineToken": "jpt_01abc"}, id="not a machine token"),
        pytest.param({"machineId": "01m8p07pmqayq5j17a974pa5nd"}, id="machineId without mach_"),
        pytest.param({"certificate": "other key"}, id="a certificate for another key"),
        pytest.param({"caCertificates": ""}, id="no CA"),
        pytest.param({"bootstrap": None}, id="no bootstrap"),
    ],
)
def test_an_unusable_admission_records_nothing_and_keeps_the_key(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any]
) -> None:
    # Given a server whose "admitted" answer is not a usable identity
    directory = tmp_path / "machine"
    if changes.get("certificate") == "other key":
        server.answer(lambda request: admission(request, certificate=other_certificate()))
    else:
        server.answer(lambda request: admission(request, **changes))

    # When
    code, out, err = run(*_join(server, directory), capsys=capsys)

    # Then no identity is recorded: only the key and CSR, for the next try
    line = plain_failure(code, err)
    assert "its answer is unusable" in line and "nothing was recorded" in line
    assert "Admitted" not in out
    assert sorted(p.name for p in directory.iterdir()) == [statedir.CSR, statedir.KEY]
    key = (directory / statedir.KEY).read_bytes()

    # And when the server is fixed, the same join is admitted with that same key
    server.answer(admission)
    code, out, err = run(*_join(server, directory), capsys=capsys)
    assert code == Exit.OK, err
    assert (directory / statedir.KEY).read_bytes() == key
    assert (directory / statedir.TOKEN).read_text() == MACHINE_TOKEN + "\n"
    assert json.loads((directory / statedir.MACHINE).read_text())["certificateExpiresAt"] == EXPIRES_AT


@pytest.mark.parametrize(
    ("retry_after", "pause"),
    [
        ('"soon"', agent.DEFAULT_RETRY_AFTER),
        ("null", agent.DEFAULT_RETRY_AFTER),
        ("1e400", 3600.0),
        ("86400", 3600.0),
        ("-5", 1.0),
        ("0.01", 1.0),
        ("12", 12.0),
    ],
)
def test_a_waiting_agent_keeps_its_pause_between_a_second_and_an_hour(
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    retry_after: str,
    pause: float,
) -> None:
    # Given a deferred join whose retryAfterSeconds is odd, then an admission
    pending = (
        '{"ok": false, "errMsg": "join deferred: approval. An operator must approve jreq_01x.", '
        '"joinRequest": {"requestId": "jreq_01x", "expiresAt": "2030-01-01T00:00:00Z"}, '
        f'"retryAfterSeconds": {retry_after}}}'
    )
    server.answer(Reply(202, pending.encode()), admission)
    pauses: list[float] = []

    def pause_for(self: agent.Agent, status: Any, wait: Any, seconds: float, state: str) -> float:
        pauses.append(seconds)
        return seconds

    monkeypatch.setattr(agent.Agent, "_pause", pause_for)

    # When
    code, _, err = run(*_join(server, tmp_path / "machine", "--wait"), capsys=capsys)

    # Then
    assert code == Exit.OK, err
    assert pauses == [pause]


@pytest.mark.parametrize(
    ("err_msg", "said"),
    [
        (
            "deferred for review (tpm: unknown EK); ask jreq_01x's operator",
            "deferred for review (tpm: unknown EK); ask jreq_01x's operator",
        ),
        ("join deferred:\x1b[2J cleared", "join deferred: [2J cleared"),
        ("", "Join deferred."),
        (None, "Join deferred."),
    ],
    ids=["any wording", "control characters", "empty", "not a string"],
)
def test_a_deferral_says_the_servers_message_as_sent(
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    err_msg: str | None,
    said: str,
) -> None:
    # Given a deferral whose errMsg is worded in a way no client knows (or missing)
    deferral = {
        "ok": False,
        "errMsg": err_msg,
        "joinRequest": {"requestId": "jreq_01x", "expiresAt": EXPIRES_AT},
    }
    server.answer(reply(202, deferral))

    # When the agent joins without waiting
    code, out, err = run(*_join(server, tmp_path / "machine"), capsys=capsys)

    # Then it is pending, and says the message on a line of its own, only control characters blanked
    assert code == Exit.PENDING, err
    assert said in out.splitlines()


@pytest.mark.parametrize(
    ("where", "who", "approve"),
    [
        ({"poolId": "gpu", "siteId": "dc1"}, "An operator of pool gpu decides it with:", ""),
        (
            {"poolId": None, "siteId": "dc1"},
            "An operator of a pool of site dc1 decides it with:",
            " --pool <a pool of site dc1>",
        ),
    ],
    ids=["a pool's request", "a site's unclaimed request"],
)
def test_a_deferral_says_who_decides_and_the_command_that_works(
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: dict[str, Any],
    who: str,
    approve: str,
) -> None:
    # Given a deferral naming the request's pool, or only its site (no pool has claimed it)
    deferral = {
        "ok": False,
        "errMsg": "join deferred",
        "joinRequest": {"requestId": "jreq_01x", "expiresAt": EXPIRES_AT, **where},
    }
    server.answer(reply(202, deferral))
    # When the agent joins without waiting
    code, out, err = run(*_join(server, tmp_path / "machine"), capsys=capsys)
    # Then it names who decides, and an approve command that works as printed (a site's request
    # is approved into a pool the operator names)
    assert code == Exit.PENDING, err
    assert who in out.splitlines()
    assert f"  joinplane requests approve jreq_01x{approve}" in out.splitlines()


@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
def test_a_poll_interval_that_is_not_a_finite_number_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    # When
    with pytest.raises(SystemExit) as parsed:
        main.main(["join", "--url", "http://127.0.0.1:9", "--token", "jpt_x", "--poll-interval", value])

    # Then
    assert parsed.value.code == Exit.USAGE
    assert "not a finite number" in capsys.readouterr().err


def test_a_dry_run_with_odd_reasons_still_reports_the_verdict(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given
    server.answer(
        reply(200, {"ok": False, "verdict": "defer", "reasons": [1, "x", {"code": "c", "message": "m"}]})
    )

    # When
    code, out, err = run(*_join(server, tmp_path / "machine", "--dry-run"), capsys=capsys)

    # Then
    assert code == Exit.PENDING, err
    assert "would DEFER" in out and "m (c)" in out


# --- answers Python cannot read ------------------------------------------------------------------

_BIG_NUMBER = b'{"a": ' + b"1" * 5000 + b"}"
_DEEP = b"[" * 100_000 + b"]" * 100_000
# Parses, but a table cell holding it would recurse past Python's stack limit.
_DEEP_ENOUGH = b'{"pools": [{"poolId": "p", "name": ' + b"[" * 600 + b"]" * 600 + b"}]}"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        pytest.param(
            Reply(200, _BIG_NUMBER), "holds a number too long to read", id="200 with a 5000-digit number"
        ),
        pytest.param(Reply(400, _BIG_NUMBER), "HTTP_400", id="400 with a 5000-digit number"),
        pytest.param(Reply(200, _DEEP), "is nested too deeply", id="200 nested 100000 deep"),
        pytest.param(Reply(502, b'{"x": ' + _DEEP + b"}"), "HTTP_502", id="502 nested 100000 deep"),
        pytest.param(Reply(200, _DEEP_ENOUGH), "is nested too deeply", id="200 nested 600 deep"),
        pytest.param(Reply(200, b'{"a": "\xff"}'), "is not UTF-8", id="200 not UTF-8"),
        pytest.param(Reply(200, b"<html>hi</html>"), "is not JSON", id="200 HTML"),
        pytest.param(
            Reply(503, b'{"code": 14, "mess', length=4096), "HTTP_503", id="503 whose body breaks off"
        ),
    ],
)
def test_an_unreadable_answer_is_one_plain_line(
    server: FakeServer, capsys: pytest.CaptureFixture[str], answer: Reply, said: str
) -> None:
    # Given
    server.answer(answer)

    # When
    code, out, err = run(*operator(server, "pools", "list"), capsys=capsys)

    # Then
    assert said in plain_failure(code, err)
    assert out == ""


def test_an_unreadable_answer_to_a_join_or_renewal_writes_nothing(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given
    directory = joined_directory(tmp_path / "joined", server.url)
    before = snapshot(directory)
    server.answer(Reply(200, _BIG_NUMBER))

    # When
    renewed = run("renew", "--dir", str(directory), "--rotate-key", capsys=capsys)
    joined = run(*_join(server, tmp_path / "new"), capsys=capsys)

    # Then
    assert "holds a number too long to read" in plain_failure(renewed[0], renewed[2])
    assert snapshot(directory) == before
    assert "holds a number too long to read" in plain_failure(joined[0], joined[2])
    assert not (tmp_path / "new" / statedir.TOKEN).exists()


# --- operator lists ------------------------------------------------------------------------------

LISTS = [
    pytest.param(["pools", "list"], "pools", "a pool list", id="pools"),
    pytest.param(["requests", "list"], "requests", "a join request list", id="requests"),
    pytest.param(["tokens", "list"], "joinTokens", "a join token list", id="tokens"),
    pytest.param(["machines", "list"], "machines", "a machine list", id="machines"),
    pytest.param(["audit", "list"], "events", "an audit event list", id="audit"),
]


@pytest.mark.parametrize(("command", "key", "thing"), LISTS)
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"{}", id="an empty object"),
        pytest.param(b"", id="an empty body"),
        pytest.param(b'{"KEY": [1, "x", null]}', id="items that are not objects"),
        pytest.param(b'{"KEY": "x"}', id="not a list"),
        pytest.param(b'{"KEY": [], "nextCursor": 5}', id="a cursor that is not a string"),
    ],
)
def test_a_list_answer_without_its_list_is_an_error_not_an_empty_list(
    server: FakeServer,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    key: str,
    thing: str,
    body: bytes,
) -> None:
    # Given
    server.answer(Reply(200, body.replace(b"KEY", key.encode())))

    # When
    code, out, err = run(*operator(server, *command), capsys=capsys)

    # Then
    assert f"the server's answer was not {thing}" in plain_failure(code, err)
    assert out == ""


@pytest.mark.parametrize(("command", "key", "thing"), LISTS)
def test_an_empty_list_is_still_said_plainly(
    server: FakeServer, capsys: pytest.CaptureFixture[str], command: list[str], key: str, thing: str
) -> None:
    # Given
    server.answer(reply(200, {key: []}))

    # When
    code, out, err = run(*operator(server, *command), capsys=capsys)

    # Then
    assert code == Exit.OK, err
    assert out.startswith("No ")


def test_all_pages_stops_when_the_server_repeats_a_cursor(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a server that hands back the same cursor (five times, then it would end)
    page = reply(200, {"pools": [{"poolId": "p1"}], "nextCursor": "p1"})
    server.answer(page, page, page, page, page, reply(200, {"pools": []}))

    # When
    code, _, err = run(*operator(server, "pools", "list", "--all"), capsys=capsys)

    # Then
    assert "repeats itself" in plain_failure(code, err)
    assert len(server.requests) == 2


def test_odd_fields_in_operator_answers_show_as_blanks(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given objects whose nested fields have the wrong types
    odd = {"machine": "y", "reasons": [1], "memoryMb": "x", "cpuCount": "y", "joinRequestTtlSeconds": "x"}
    server.answer(
        reply(200, {"requests": [odd]}),
        reply(200, {"machines": [odd]}),
        reply(200, odd),
        reply(200, {**odd, "certificateTtlSeconds": 1e308 * 10}),
    )

    # When
    answers = [
        run(*operator(server, "requests", "list"), capsys=capsys),
        run(*operator(server, "machines", "list"), capsys=capsys),
        run(*operator(server, "requests", "approve", "jreq_01x"), capsys=capsys),
        run(*operator(server, "pools", "get"), capsys=capsys),
    ]

    # Then
    assert [code for code, _, _ in answers] == [Exit.OK] * 4, [err for _, _, err in answers]


# --- refusals: the server's reason decides the exit code ---------------------------------------

_JOIN_REFUSALS = [
    (errors.Unauthenticated, errors.JOIN_TOKEN_INVALID, {}, Exit.UNAUTHENTICATED),
    (errors.Unauthenticated, errors.PROOF_REQUIRED, {}, Exit.UNAUTHENTICATED),
    (errors.Unauthenticated, errors.PROOF_STALE, {}, Exit.UNAUTHENTICATED),
    (errors.Unauthenticated, errors.PROOF_INVALID, {}, Exit.UNAUTHENTICATED),
    (errors.Unauthenticated, errors.PROOF_REPLAYED, {}, Exit.UNAUTHENTICATED),
    (errors.PermissionDenied, errors.JOIN_REQUEST_REJECTED, {"requestId": "jreq_1"}, Exit.REJECTED),
    (errors.PermissionDenied, errors.JOIN_REQUEST_EXPIRED, {"requestId": "jreq_1"}, Exit.EXPIRED),
    (errors.PermissionDenied, errors.JOIN_REQUEST_EXPIRED, {}, Exit.EXPIRED),
    (errors.PermissionDenied, errors.JOIN_DENIED, {}, Exit.DENIED),
    (errors.PermissionDenied, errors.MACHINE_REVOKED, {}, Exit.DENIED),
    (errors.PermissionDenied, errors.KEY_RETIRED, {}, Exit.DENIED),
    (errors.FailedPrecondition, errors.WRONG_POOL, {}, Exit.ERROR),
    (errors.FailedPrecondition, errors.POOL_ARCHIVED, {}, Exit.ERROR),
    (errors.FailedPrecondition, errors.PREFLIGHT_FAILED, {}, Exit.ERROR),
    (errors.InvalidArgument, errors.PROOF_MALFORMED, {}, Exit.ERROR),
    (errors.InvalidArgument, errors.VALIDATION_FAILED, {}, Exit.ERROR),
]
_RENEW_REFUSALS = [
    (errors.Unauthenticated, errors.MACHINE_TOKEN_INVALID, {}, Exit.UNAUTHENTICATED),
    (errors.Unauthenticated, errors.PROOF_REQUIRED, {}, Exit.UNAUTHENTICATED),
    (errors.Unauthenticated, errors.PROOF_REPLAYED, {}, Exit.UNAUTHENTICATED),
    (errors.PermissionDenied, errors.MACHINE_REVOKED, {}, Exit.DENIED),
    (errors.FailedPrecondition, errors.KEY_IN_USE, {}, Exit.ERROR),
    (errors.FailedPrecondition, errors.MACHINE_HAS_NO_KEY, {}, Exit.ERROR),
]


def _refusal(kind: type[errors.JoinplaneError], reason: str, metadata: dict[str, str]) -> Reply:
    """The refusal exactly as the join dialect renders it, under a message no client should read."""
    rendered = join_wire.render_error(
        kind("(words the CLI must not depend on)", reason=reason, metadata=metadata)
    )
    return Reply(rendered["statusCode"], rendered["body"].encode())


@pytest.mark.parametrize(("kind", "reason", "metadata", "exit_code"), _JOIN_REFUSALS)
def test_a_join_refusal_exits_with_the_code_of_its_reason(
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: type[errors.JoinplaneError],
    reason: str,
    metadata: dict[str, str],
    exit_code: Exit,
) -> None:
    # Given a server that refuses the join for `reason`
    server.answer(_refusal(kind, reason, metadata))

    # When
    code, _, err = run(*_join(server, tmp_path / "machine"), capsys=capsys)

    # Then the exit code is the documented one for that reason (docs/cli.md)
    assert code == exit_code, err
    assert "Traceback" not in err


@pytest.mark.parametrize(("kind", "reason", "metadata", "exit_code"), _RENEW_REFUSALS)
def test_a_renewal_refusal_exits_with_the_code_of_its_reason(
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: type[errors.JoinplaneError],
    reason: str,
    metadata: dict[str, str],
    exit_code: Exit,
) -> None:
    # Given a joined machine whose server refuses its renewal for `reason`
    directory = joined_directory(tmp_path, server.url)
    before = snapshot(directory)
    server.answer(_refusal(kind, reason, metadata))

    # When
    code, _, err = run("renew", "--dir", str(directory), capsys=capsys)

    # Then the exit code is the documented one, and the machine's directory is as it was
    assert code == exit_code, err
    assert snapshot(directory) == before


# --- the agent service: retries, permanent refusals --------------------------------------------


def _due_now(directory: Path) -> None:
    """Give DIR's machine a certificate past two thirds of its life (issued 2 h ago, 10 min left)."""
    request = x509.load_pem_x509_csr((directory / statedir.CSR).read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, MACHINE_ID)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(_CA_NAME)
        .public_key(request.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=2))
        .not_valid_after(now + datetime.timedelta(minutes=10))
        .sign(_CA_KEY, hashes.SHA256())
    )
    files = {name: (directory / name).read_bytes() for name in statedir.OURS}
    files[statedir.CERTIFICATE] = certificate.public_bytes(serialization.Encoding.PEM)
    statedir.commit(directory, {name: statedir.content(name, data) for name, data in files.items()})


def _service(
    directory: Path, hooks: Path
) -> tuple[service.Service, service.Stopper, io.StringIO, io.StringIO]:
    out, err, stopper = io.StringIO(), io.StringIO(), service.Stopper()
    options = service.ServiceOptions(
        url=None,
        token=None,
        directory=directory,
        on_renew=f"echo $JOINPLANE_EVENT >> {hooks}",
        out=out,
        err=err,
    )
    return service.Service(options, stopper), stopper, out, err


def test_the_agent_waits_out_a_busy_server_then_renews_and_runs_its_hook(
    server: FakeServer, tmp_path: Path
) -> None:
    # Given a joined machine due for renewal, and a server that is busy twice before it renews
    directory = joined_directory(tmp_path, server.url)
    _due_now(directory)
    server.answer(
        Reply(503, json.dumps({"code": 14, "message": "try later"}).encode()),
        Reply(429, b'{"message": "Too Many Requests"}'),
        renewal,
    )
    hooks = tmp_path / "hooks.log"
    agent_service, stopper, out, err = _service(directory, hooks)

    # When the agent runs until its hook has run, then is told to stop
    finished: list[Exit] = []
    thread = threading.Thread(target=lambda: finished.append(agent_service.run()))
    thread.start()
    try:
        wait_until(lambda: hooks.exists() and "renewed" in hooks.read_text(), 15, 0.05)
    finally:
        stopper.handle(signal.SIGTERM, None)
        thread.join(15)

    # Then it retried the 503 and the 429 with backoff, renewed, ran the hook, and stopped cleanly
    assert finished == [Exit.OK], err.getvalue()
    assert [path for path, _ in server.requests] == ["/machines/renew"] * 3
    retries = [line for line in err.getvalue().splitlines() if line.startswith("Renewal failed: ")]
    assert len(retries) == 2 and "UNAVAILABLE (14): try later; trying again in" in retries[0], retries
    assert f"Renewed the certificate of {MACHINE_ID}" in out.getvalue()
    assert out.getvalue().count("; renewing at ") == 2  # the old certificate's schedule, then the new one's
    assert hooks.read_text() == "renewed\n"
    assert "Stopped (SIGTERM)" in out.getvalue()
    issued = x509.load_pem_x509_certificate((directory / statedir.CERTIFICATE).read_bytes())
    assert issued.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)


@pytest.mark.parametrize(
    ("kind", "reason", "exit_code"),
    [
        (errors.PermissionDenied, errors.MACHINE_REVOKED, Exit.DENIED),
        (errors.Unauthenticated, errors.MACHINE_TOKEN_INVALID, Exit.UNAUTHENTICATED),
    ],
)
def test_a_permanent_refusal_ends_the_agent_with_its_code_and_no_retry(
    server: FakeServer, tmp_path: Path, kind: type[errors.JoinplaneError], reason: str, exit_code: Exit
) -> None:
    # Given a joined machine due for renewal, whose server refuses it for good
    directory = joined_directory(tmp_path, server.url)
    _due_now(directory)
    before = snapshot(directory)
    server.answer(_refusal(kind, reason, {}))
    agent_service, _, _, _ = _service(directory, tmp_path / "hooks.log")

    # When the agent runs
    with pytest.raises(CliError) as refused:
        agent_service.run()

    # Then it ends with the refusal's documented code after one attempt, DIR as it was, no hook run
    assert refused.value.exit_code == exit_code
    assert len(server.requests) == 1
    assert snapshot(directory) == before
    assert not (tmp_path / "hooks.log").exists()
