"""`joinplane agent`: the machine's identity as a service, the way kubelet, spire-agent and
`step ca renew --daemon` keep theirs.

It joins when DIR holds no identity (waiting for an operator as `join --wait` does), then renews
the certificate at about two thirds of its lifetime, jittered so a rack of machines admitted together
does not renew in step. An unreachable server (at boot too), a 5xx or a 429 is waited out with
exponential backoff and jitter, capped at a minute; a permanent refusal (rejected, expired, denied,
revoked, a bad token) ends the agent with its documented exit code, which the systemd unit does not
restart. SIGTERM is honoured between steps, never in the middle of replacing DIR: a renewal under
way finishes (or fails) first, so DIR is always one whole identity.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TextIO

from joinplane_cli import agent, render, renew, skew, statedir
from joinplane_cli.api import ApiError, Unreachable
from joinplane_cli.exits import CliError, Exit

RENEW_AT = 2 / 3  # of the certificate's lifetime, as kubelet and step do
RENEW_JITTER = 0.05  # of the lifetime, either side of RENEW_AT
HOOK_TIMEOUT = 300.0  # an --on-renew command that hangs must not stop the renewals after it
LONGEST_NAP = 300.0  # re-read the wall clock this often: a suspended machine wakes up late
# The hook needs the identity, not the secrets the agent was started with.
_HOOK_HIDDEN = ("JOINPLANE_TOKEN", "JOINPLANE_API_KEY")


class Stopper:
    """SIGTERM and SIGINT as a request to stop, which the agent honours at its next sleep: a signal
    never lands in the middle of replacing DIR or of a hook."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self._event.set()

    def sleep(self, seconds: float) -> bool:
        """Sleep `seconds`; True (at once) when a stop was requested."""
        return self._event.wait(max(seconds, 0.0))

    @property
    def stopping(self) -> bool:
        return self._event.is_set()

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        previous = {number: signal.signal(number, self.handle) for number in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


def renewal_time(issued_at: float, expires_at: float, draw: float) -> float:
    """When to renew a certificate issued at `issued_at` that expires at `expires_at`: two thirds of
    its lifetime, moved by up to `RENEW_JITTER` of it either way as `draw` (0 to 1) says."""
    lifetime = max(expires_at - issued_at, 0.0)
    return issued_at + lifetime * (RENEW_AT + (2 * draw - 1) * RENEW_JITTER)


@dataclass(frozen=True)
class Held:
    """The certificate DIR holds, as the renewal schedule needs it."""

    machine_id: str
    issued_at: float
    expires_at: float


def held(directory: Path) -> Held:
    """The machine id and the certificate's issue and expiry instants. The issue instant is the
    server's clock at issuance (machine.json), since notBefore is backdated for clock skew; a
    directory written before that was recorded falls back to notBefore."""
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate((directory / statedir.CERTIFICATE).read_bytes())
    except (OSError, ValueError) as bad:
        raise CliError(f"{directory / statedir.CERTIFICATE}: {bad}", Exit.USAGE) from None
    machine = renew.stored_machine(directory)
    not_before = certificate.not_valid_before_utc.timestamp()
    expires_at = certificate.not_valid_after_utc.timestamp()
    issued_at = render.parse_time(machine.get("certificateIssuedAt"))
    if issued_at is None or not not_before <= issued_at < expires_at:
        issued_at = not_before
    return Held(str(machine.get("machineId") or "?"), issued_at, expires_at)


def joined(directory: Path) -> bool:
    return all((directory / name).is_file() for name in (statedir.TOKEN, statedir.KEY, statedir.CERTIFICATE))


@dataclass
class ServiceOptions:
    url: str | None
    token: str | None
    directory: Path
    on_renew: str | None = None
    output: str = "table"
    timeout: float = 30.0
    tpm: bool = False
    tpm_ek: str = "auto"
    # --aws-iam --token-id: the first join proves the machine's AWS identity, no secret.
    aws_iam: bool = False
    token_id: str = ""
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)


class Service:
    def __init__(self, options: ServiceOptions, stopper: Stopper) -> None:
        self.o = options
        self.stopper = stopper

    def say(self, text: str, **event: object) -> None:
        """A line for people, or with -o json one JSON object per line (`event` names what happened)."""
        if self.o.output == "json":
            print(json.dumps(event, separators=(",", ":")), file=self.o.out, flush=True)
        else:
            print(text, file=self.o.out, flush=True)

    def run(self) -> Exit:
        try:
            with statedir.locked(self.o.directory):
                return self._serve()
        except statedir.Busy as busy:
            raise CliError(str(busy), Exit.USAGE) from None

    def _stopped(self) -> Exit:
        name = signal.Signals(self.stopper.signum).name if self.stopper.signum else "a stop request"
        self.say(
            f"Stopped ({name}); {self.o.directory} holds a whole identity or none.",
            event="stopped",
            signal=name,
            directory=str(self.o.directory),
        )
        # systemd's stop is not a failure; Ctrl-C at a terminal reads as the interruption it is.
        return Exit.INTERRUPTED if self.stopper.signum == signal.SIGINT else Exit.OK

    def _serve(self) -> Exit:
        directory = self.o.directory
        try:
            statedir.recover(directory)
        except OSError as failed:
            raise CliError(f"{directory}: {failed.strerror or failed}", Exit.USAGE) from None
        if not joined(directory):
            code = self._join()
            if code == Exit.OK:
                self._hook("joined")  # also when a stop came meanwhile: the identity did change
            if self.stopper.stopping:
                return self._stopped()
            if code != Exit.OK:
                return code
        backoff = agent.Backoff()
        due: float | None = None
        while True:
            if due is None:
                certificate = held(directory)
                due = renewal_time(certificate.issued_at, certificate.expires_at, random.random())
                # The certificate's instants are the server's: so is the clock they are read on.
                now, expires = skew.now(), render.rfc3339(certificate.expires_at)
                self.say(
                    f"Certificate of {certificate.machine_id} expires {expires} "
                    f"({render.until(expires, now)}); renewing at "
                    f"{render.rfc3339(due)} ({render.until(render.rfc3339(due), now)}).",
                    event="scheduled",
                    machineId=certificate.machine_id,
                    certificateExpiresAt=expires,
                    renewAt=render.rfc3339(due),
                )
            if self._sleep_until(due):
                return self._stopped()
            try:
                renew.renew(
                    renew.RenewOptions(
                        url=self.o.url,
                        directory=directory,
                        output=self.o.output,
                        timeout=self.o.timeout,
                        out=self.o.out,
                        err=self.o.err,
                    ),
                    lock_held=True,
                )
            except Unreachable as down:
                due = self._retry_later(backoff, down.message)
                continue
            except ApiError as failed:
                if not agent.retryable(failed):
                    raise
                due = self._retry_later(backoff, failed.message)
                continue
            backoff.reset()
            due = None
            self._hook("renewed")

    def _join(self) -> Exit:
        if not self.o.url or not (self.o.token or (self.o.aws_iam and self.o.token_id)):
            raise CliError(
                f"{self.o.directory} holds no identity yet: to join, pass --url and --token "
                "(or --token-file, or JOINPLANE_URL and JOINPLANE_TOKEN)",
                Exit.USAGE,
            )
        joining = agent.Agent(
            agent.JoinOptions(
                url=self.o.url,
                token=self.o.token or "",
                directory=self.o.directory,
                wait=True,
                service=True,
                tpm=self.o.tpm,
                tpm_ek=self.o.tpm_ek,
                aws_iam=self.o.aws_iam,
                token_id=self.o.token_id,
                output=self.o.output,
                timeout=self.o.timeout,
                out=self.o.out,
                err=self.o.err,
                sleep=self.stopper.sleep,
            )
        )
        return joining.join(lock_held=True)

    def _retry_later(self, backoff: agent.Backoff, why: str) -> float:
        delay = backoff.next()
        print(f"Renewal failed: {why}; trying again in {delay:.0f}s.", file=self.o.err, flush=True)
        return skew.now() + delay

    def _sleep_until(self, due: float) -> bool:
        """Sleep until the server's clock (the wall clock, corrected by what a stale proof taught)
        reaches `due`, or this machine's own clock does, whichever comes first: a wrong offset (one
        forged answer) may make the agent renew early, never let its certificate lapse. True when
        asked to stop meanwhile."""
        while (left := due - max(skew.now(), time.time())) > 0:
            if self.stopper.sleep(min(left, LONGEST_NAP)):
                return True
        return self.stopper.stopping

    def _hook(self, event: str) -> None:
        if not self.o.on_renew:
            return
        machine = renew.stored_machine(self.o.directory)
        environment = {k: v for k, v in os.environ.items() if k not in _HOOK_HIDDEN}
        environment.update(
            JOINPLANE_EVENT=event,
            JOINPLANE_DIR=str(self.o.directory),
            JOINPLANE_MACHINE_ID=str(machine.get("machineId", "")),
            JOINPLANE_CERTIFICATE_EXPIRES_AT=str(machine.get("certificateExpiresAt", "")),
        )
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", self.o.on_renew],
                cwd=self.o.directory,
                env=environment,
                stdin=subprocess.DEVNULL,
                timeout=HOOK_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            print(f"--on-renew: still running after {HOOK_TIMEOUT:.0f}s; stopped it.", file=self.o.err)
            return
        except OSError as failed:
            print(f"--on-renew: could not run it: {failed.strerror or failed}", file=self.o.err)
            return
        if done.returncode != 0:
            print(
                f"--on-renew: exited {done.returncode} (the agent carries on).", file=self.o.err, flush=True
            )


def serve(options: ServiceOptions) -> Exit:
    stopper = Stopper()
    with stopper.installed():
        return Service(options, stopper).run()


# --- the systemd unit ----------------------------------------------------------------------------


def _systemd_word(word: str) -> str:
    """One ExecStart argument: systemd expands `$` and `%`, so literal ones are doubled; quoted with
    systemd's double quotes when it has spaces or quotes."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and not any(c in word for c in " \t\"'\\;"):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def executable() -> str:
    """This `joinplane`'s absolute path, for ExecStart (systemd wants one)."""
    called = Path(sys.argv[0])
    if called.name == "joinplane" and called.is_file():
        return str(called.absolute())
    return shutil.which("joinplane") or "/usr/local/bin/joinplane"


def systemd_unit(
    program: str,
    directory: Path,
    url: str | None,
    token_file: str | None,
    on_renew: str | None,
    tpm_ek: str | None = None,
    aws_token_id: str | None = None,
) -> str:
    arguments = [program, "agent", "--dir", str(directory)]
    if tpm_ek is not None:
        arguments += ["--tpm"] + ([] if tpm_ek == "auto" else ["--tpm-ek", tpm_ek])
    if aws_token_id is not None:
        arguments += ["--aws-iam", "--token-id", aws_token_id]
    if url:
        arguments += ["--url", url]
    if token_file:
        arguments += ["--token-file", token_file]
    if on_renew:
        arguments += ["--on-renew", on_renew]
    # ProtectHome hides /home, /root and /run/user from the service: only when neither its directory
    # nor the program itself (make install-cli links into ~/.local/bin) lives there.
    home = any(
        str(path).startswith(prefix)
        for path in (directory, Path(program).resolve(), Path(program))
        for prefix in ("/home/", "/root/", "/run/user/")
    )
    sandbox = "PrivateTmp=yes\nNoNewPrivileges=yes\n" + ("" if home else "ProtectHome=yes\n")
    secret = (
        "# It joins with the machine's AWS identity (--aws-iam): no join token's secret is needed.\n"
        if aws_token_id is not None
        else "# The join token (first boot only) is JOINPLANE_TOKEN=jpt_... in /etc/joinplane/agent.env "
        "(mode 0600),\n"
        "# or a file named by --token-file; it is never written here, where every user can read it.\n"
    )
    return f"""\
# Joinplane agent: joins this machine to a pool, then keeps its certificate fresh.
# Install:  joinplane agent --print-systemd-unit [--url ...] [--dir ...] \\
#             | sudo tee /etc/systemd/system/joinplane-agent.service
#           sudo systemctl daemon-reload && sudo systemctl enable --now joinplane-agent
{secret}[Unit]
Description=Joinplane agent (machine identity and certificate renewal)
Wants=network-online.target
After=network-online.target

[Service]
Type=exec
EnvironmentFile=-/etc/joinplane/agent.env
ExecStart={" ".join(_systemd_word(a) for a in arguments)}
Restart=on-failure
RestartSec=30s
# Refusals a restart cannot change: rejected (4), expired (5), denied or revoked (6), bad token (8).
RestartPreventExitStatus=4 5 6 8
# SIGTERM waits for a renewal under way (at most one HTTP timeout) before the agent exits 0.
TimeoutStopSec=60s
UMask=0077
{sandbox}
[Install]
WantedBy=multi-user.target
"""


def print_unit(options: ServiceOptions, token_file: str | None) -> Exit:
    tpm_ek = options.tpm_ek if options.tpm else None
    aws_token_id = options.token_id if options.aws_iam else None
    unit = systemd_unit(
        executable(), options.directory, options.url, token_file, options.on_renew, tpm_ek, aws_token_id
    )
    print(unit, end="")
    return Exit.OK
