"""`joinplane` when the server's clock is not the machine's: the local runtime's clock moved forward to
test expiry, put back, or a server answering a stale proof with a Date nobody should believe. The CLI
signs again once on the server's time (as AWS SDKs correct a skewed signature) and otherwise lets
the refusal stand."""

from __future__ import annotations

import datetime
import email.utils
import http.server
import io
import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from joinplane import clock, errors, join_wire
from joinplane_cli import main, service, skew, statedir
from joinplane_cli.exits import Exit
from tests.support import serving
from tests.support.runtime import Cli, Http
from tests.support.service import Lines, stop

AHEAD = 600
CORRECTED = "signing the proof again on the server's time"


@pytest.fixture(autouse=True)
def _a_new_process() -> Iterator[None]:
    """The in-process runs below start with this machine's own clock, as a new process does."""
    skew.forget()
    yield
    skew.forget()


def _answered(cli: Cli, path: str, since: int) -> list[int]:
    """The statuses the local runtime answered for `path` since its log was `since` long."""
    log = cli.runtime.gateway.log
    assert isinstance(log, io.StringIO)
    lines = log.getvalue()[since:].splitlines()
    return [int(line.split()[4]) for line in lines if line.split()[3:4] == [path]]


def _log_length(cli: Cli) -> int:
    log = cli.runtime.gateway.log
    assert isinstance(log, io.StringIO)
    return len(log.getvalue())


def _set_clock(cli: Cli, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = Http(cli.runtime).post("/_local/clock", body)
    assert status == 200, answer
    return dict(answer)


# --- against the local runtime ------------------------------------------------------------------


def test_a_join_and_a_renewal_after_the_clock_moved_ahead_each_sign_again_once(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a pool, a token, and the server's clock ten minutes ahead of the machine's
    pool = cli.new_pool()
    token = cli.new_token(pool)
    directory = tmp_path / "machine"
    _set_clock(cli, {"advanceSeconds": AHEAD})

    # When a brand-new machine joins, and then renews in another process
    mark = _log_length(cli)
    joined = cli.run("join", "--token", token, "--dir", str(directory))
    joins = _answered(cli, "/machines/join", mark)
    mark = _log_length(cli)
    renewed = cli.run("renew", "--dir", str(directory))
    renewals = _answered(cli, "/machines/renew", mark)

    # Then each was refused as stale once, signed again on the server's time, and went through
    assert joined.code == 0, joined.err + joined.out
    assert renewed.code == 0, renewed.err + renewed.out
    assert joins == [401, 200]
    assert renewals == [401, 200]
    assert "the server's clock is 10 min ahead of this machine's" in joined.err
    assert CORRECTED in renewed.err
    # And the certificate is the server's: issued on its clock, not the machine's
    certificate = x509.load_pem_x509_certificate((directory / "machine.crt").read_bytes())
    assert certificate.not_valid_after_utc.timestamp() > clock.epoch() + 200


def test_the_clock_is_reset_and_joins_need_no_correction_again(cli: Cli, tmp_path: Path) -> None:
    # Given a server clock moved ahead and then reset
    pool = cli.new_pool()
    token = cli.new_token(pool)
    ahead = _set_clock(cli, {"advanceSeconds": AHEAD})
    back = _set_clock(cli, {"reset": True})

    # When a machine joins
    mark = _log_length(cli)
    joined = cli.run("join", "--token", token, "--dir", str(tmp_path / "machine"))

    # Then the clock is the real one again and the join went through at once
    assert ahead["offsetSeconds"] == AHEAD
    assert back["offsetSeconds"] == 0
    assert abs(clock.epoch() - time.time()) < 1
    assert joined.code == 0, joined.err
    assert _answered(cli, "/machines/join", mark) == [200]
    assert CORRECTED not in joined.err


def test_after_a_reset_a_key_that_proved_while_ahead_waits_and_a_new_key_joins(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a machine that joined while the server's clock was ten minutes ahead, and then a reset
    pool = cli.new_pool()
    token = cli.new_token(pool, "--max-uses", "2")
    _set_clock(cli, {"advanceSeconds": AHEAD})
    cli.ok("join", "--token", token, "--dir", str(tmp_path / "early"))
    _set_clock(cli, {"reset": True})

    # When it renews, and a new machine joins
    renewed = cli.run("renew", "--dir", str(tmp_path / "early"))
    mark = _log_length(cli)
    joined = cli.run("join", "--token", token, "--dir", str(tmp_path / "new"))

    # Then the early key's accepted proof stays ahead of the real time (docs/decisions.md): its
    # renewal is refused as not newer, and says so; a new key is not held back
    assert renewed.code == Exit.UNAUTHENTICATED, renewed.err
    assert "not newer than one already accepted" in renewed.err
    assert joined.code == 0, joined.err
    assert _answered(cli, "/machines/join", mark) == [200]


def _due_now(directory: Path) -> None:
    """Make DIR's certificate due for renewal: the same key, issued two hours ago by a throwaway CA,
    ten minutes left. The server never reads the certificate a renewal replaces; the agent's schedule
    does, and this saves waiting two thirds of a real lifetime."""
    authority = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a throwaway CA")])
    request = x509.load_pem_x509_csr((directory / statedir.CSR).read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(request.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=2))
        .not_valid_after(now + datetime.timedelta(minutes=10))
        .sign(authority, hashes.SHA256())
    )
    machine = json.loads((directory / statedir.MACHINE).read_text())
    machine.pop("certificateIssuedAt", None)
    files: dict[str, str | bytes] = {name: (directory / name).read_bytes() for name in statedir.OURS}
    files[statedir.CERTIFICATE] = certificate.public_bytes(serialization.Encoding.PEM)
    files[statedir.MACHINE] = json.dumps(machine) + "\n"
    statedir.commit(directory, {n: statedir.content(n, data) for n, data in files.items()})


def test_the_agent_renews_after_the_clock_moved_ahead_and_schedules_on_the_server_clock(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a machine joined on the real clock, whose certificate (300 s lifetime) is due for
    # renewal, and the server's clock then moved ten minutes ahead
    pool = cli.new_pool(certificate_ttl="300")
    token = cli.new_token(pool)
    directory = tmp_path / "machine"
    cli.ok("join", "--token", token, "--dir", str(directory))
    _due_now(directory)
    _set_clock(cli, {"advanceSeconds": AHEAD})

    # When the agent runs
    agent = cli.start("agent", "--dir", str(directory))
    out, err = Lines(agent.stdout), Lines(agent.stderr)  # type: ignore[arg-type]
    try:
        renewed, _ = out.wait_for(r"^Renewed the certificate of mach_", 30)
        _, scheduled = out.wait_for(r"; renewing at (\S+) ", 5, after=renewed + 1)
        agent.send_signal(signal.SIGTERM)
        code = stop(agent)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()

    # Then it renewed (signing again once on the server's time) and the next renewal is due two
    # thirds into the new certificate's life on the server's clock, not ten minutes later
    assert code == 0, err.text()
    assert CORRECTED in err.text()
    due = datetime.datetime.fromisoformat(scheduled.group(1)).timestamp()
    assert 150 <= due - clock.epoch() <= 230, due - clock.epoch()
    certificate = x509.load_pem_x509_certificate((directory / "machine.crt").read_bytes())
    assert certificate.not_valid_after_utc.timestamp() > clock.epoch() + 200


# --- against a server whose Date is not to be believed ------------------------------------------


class _Stale:
    """A server refusing every proof as stale, with the Date and ErrorInfo metadata a test gives;
    it keeps each request's Joinplane-Proof."""

    def __init__(self) -> None:
        self.date: str | None = None
        self.metadata: dict[str, str] = {}
        self.proofs: list[str] = []
        self.url = ""


@pytest.fixture
def stale() -> Iterator[_Stale]:
    state = _Stale()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            state.proofs.append(self.headers.get("joinplane-proof", ""))
            refused = join_wire.render_error(
                errors.Unauthenticated("too old", reason=errors.PROOF_STALE, metadata=state.metadata)
            )
            body = refused["body"].encode()
            self.send_response_only(refused["statusCode"])
            if state.date is not None:
                self.send_header("Date", state.date)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        state.url = url
        yield state


def _join(stale: _Stale, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main.main(["join", "--url", stale.url, "--token", "jpt_x", "--dir", str(tmp_path / "m")])
    return code, capsys.readouterr().err


def _t(proof: str) -> float:
    found = re.match(r"t=([0-9]{13}),", proof)
    assert found, proof
    return int(found.group(1)) / 1000


def _http_date(instant: float) -> str:
    return email.utils.formatdate(instant, usegmt=True)


@pytest.mark.parametrize(
    "date",
    [
        "yesterday",
        "",
        "Tue, 32 Dec 2026 10:00:00 GMT",
        "Tue, 01 Dec 2026 25:00:00 GMT",
        "Tue, 01 Dec 2026 10:00:00 +0200",
        "Tuesday, 01-Dec-26 10:00:00 GMT",
        "Tue, 01 Dec 99999 10:00:00 GMT",
        None,
    ],
)
def test_a_garbage_date_is_ignored_and_the_refusal_stands(
    stale: _Stale, tmp_path: Path, capsys: pytest.CaptureFixture[str], date: str | None
) -> None:
    # Given a server refusing the proof as stale with a Date that is not an HTTP date (or none),
    # and a serverTime that is not Unix milliseconds
    stale.date = date
    stale.metadata = {"serverTime": "soon"}

    # When a machine joins
    code, err = _join(stale, tmp_path, capsys)

    # Then it asked once, kept its own clock, and the refusal is what it always was
    assert code == Exit.UNAUTHENTICATED, err
    assert len(stale.proofs) == 1
    assert "proof of its key" in err and CORRECTED not in err
    assert skew.offset() == 0


def test_a_date_beyond_the_bound_is_not_followed(
    stale: _Stale, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a server claiming to be 40 days ahead
    stale.date = _http_date(time.time() + 40 * 86_400)

    # When a machine joins
    code, err = _join(stale, tmp_path, capsys)

    # Then no proof was signed for that time: one request, and the clocks are named as the problem
    assert code == Exit.UNAUTHENTICATED, err
    assert len(stale.proofs) == 1
    assert "40 days ahead of this machine's, more than the 31 days" in err
    assert skew.offset() == 0


def test_the_date_alone_corrects_the_clock_once_and_only_once(
    stale: _Stale, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a server with no serverTime in its refusals, whose Date is ten minutes ahead, and which
    # refuses the corrected proof as stale too
    stale.date = _http_date(time.time() + AHEAD)

    # When a machine joins
    code, err = _join(stale, tmp_path, capsys)

    # Then it signed again once, on the Date's time (whole seconds), and then let the refusal stand
    assert code == Exit.UNAUTHENTICATED, err
    assert len(stale.proofs) == 2
    first, second = (_t(proof) for proof in stale.proofs)
    assert AHEAD - 2 <= second - first <= AHEAD + 2
    assert err.count(CORRECTED) == 1


def test_server_time_in_milliseconds_wins_over_the_date(
    stale: _Stale, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a refusal whose serverTime is ten minutes ahead and whose Date is the machine's time
    stale.date = _http_date(time.time())
    stale.metadata = {"serverTime": str(int((time.time() + AHEAD) * 1000))}

    # When a machine joins
    _join(stale, tmp_path, capsys)

    # Then the second proof is dated on serverTime
    first, second = (_t(proof) for proof in stale.proofs)
    assert AHEAD - 1 <= second - first <= AHEAD + 1
    assert AHEAD - 1 <= skew.offset() <= AHEAD + 1


@pytest.mark.parametrize(
    ("url", "followed"),
    [
        ("https://api.example.com/prod", True),
        ("http://127.0.0.1:3000", True),
        ("http://127.5.6.7:3000", True),
        ("http://localhost:3000", True),
        ("http://[::1]:3000", True),
        ("http://10.0.0.5:3000", False),
        ("http://joinplane.internal", False),
        ("http://[2001:db8::1]:3000", False),
    ],
)
def test_a_clock_is_followed_only_over_https_or_from_this_machine(url: str, followed: bool) -> None:
    # Given an API URL
    # When the CLI asks whether a stale-proof refusal from it may correct the clock
    # Then only an answer no one on the way could forge (HTTPS, or a loopback address) may: one
    # forged on plain http could have the machine sign a post-dated proof to replay later
    assert skew.may_follow(url) is followed


class _Ticking(service.Stopper):
    """A stopper whose sleeps pass instantly, each moving a fake wall clock on."""

    def __init__(self, clock_now: list[float]) -> None:
        super().__init__()
        self.clock_now = clock_now
        self.naps: list[float] = []

    def sleep(self, seconds: float) -> bool:
        self.naps.append(seconds)
        self.clock_now[0] += seconds
        return False


def test_a_wrong_offset_never_delays_the_agent_past_its_own_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an agent whose clock a forged answer put 30 days behind the server's real one
    wall = [1_800_000_000.0]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    assert skew.learn(wall[0] - 30 * 86_400, wall[0], wall[0], err=io.StringIO())
    stopper = _Ticking(wall)
    options = service.ServiceOptions(url=None, token=None, directory=Path("."))
    agent_service = service.Service(options, stopper)

    # When it sleeps until a renewal due an hour from now
    stopped = agent_service._sleep_until(wall[0] + 3_600)

    # Then it woke after that hour on its own clock, not 30 days and an hour later
    assert stopped is False
    assert sum(stopper.naps) == pytest.approx(3_600)
