"""`joinplane join`: the machine asks to join a pool with its facts, its key's CSR and (with --tpm)
its TPM's attestation, waits for an operator while the join is deferred, and writes its identity to
DIR once admitted. The agent service (`service`) joins through it too, and reuses its waiting: the
retry-after bounds and the backoff. What a refusal means is in `refusals`; what an admission must
hold before anything is written, in `issuance`."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import random
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from joinplane_cli import facts as machine_facts
from joinplane_cli import issuance, render, statedir, tpm
from joinplane_cli.api import ApiError, Client, Response, Retry, Unreachable
from joinplane_cli.exits import CliError, Exit
from joinplane_cli.keys import MachineKey, csr_matches
from joinplane_cli.refusals import (
    AWS_REASONS,
    PROOF_REASONS,
    TPM_ACTIVATION_FAILED,
    TPM_ACTIVATION_REQUIRED,
    Denial,
    classify_denial,
)

if TYPE_CHECKING:
    from joinplane_cli import aws_iam

DEFAULT_RETRY_AFTER = 30.0
RETRY_AFTER_RANGE = (1.0, 3600.0)  # whatever the server says, ask again within a second to an hour
JITTER = 0.25  # up to 25% later than asked: many machines deferred together must not retry in step
QUICK_RETRIES = 3  # transient failures retried even without --wait
MAX_BACKOFF = 60.0

# Challenges answered in a row without an outcome: a server that keeps asking is not answered forever.
MAX_TPM_CHALLENGES = 3
_MACHINE_TOKEN = re.compile(r"jpm_[0-9A-Za-z_]+")


def retry_after(value: Any) -> float:
    """The server's `retryAfterSeconds`, kept within `RETRY_AFTER_RANGE`; the default when it is
    missing, zero or not a number."""
    if isinstance(value, bool) or not value:
        return DEFAULT_RETRY_AFTER
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return DEFAULT_RETRY_AFTER
    if math.isnan(seconds):
        return DEFAULT_RETRY_AFTER
    low, high = RETRY_AFTER_RANGE
    return min(max(seconds, low), high)


def _words(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class StatusLine:
    """One line rewritten in place on a terminal; plain lines for logs and pipes (a `\\r` there
    would glue every update into one unreadable line)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._shown = False

    def show(self, text: str, *, tick: bool = False) -> None:
        if self.tty:
            self.out.write("\r\x1b[2K" + text)
            self._shown = True
        elif not tick:
            self.out.write(text + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.tty and self._shown:
            self.out.write("\n")
            self.out.flush()
        self._shown = False


@dataclass
class JoinOptions:
    url: str
    token: str
    directory: Path
    wait: bool = False
    dry_run: bool = False
    poll_interval: float | None = None
    max_wait: float | None = None
    new_key: bool = False
    rejoin: bool = False
    output: str = "table"
    timeout: float = 30.0
    # `joinplane agent`: an unreachable or failing server is waited out (with backoff), at boot too.
    service: bool = False
    # --tpm: attest with the TPM at TPM2TOOLS_TCTI (credential activation), its EK of `tpm_ek`.
    tpm: bool = False
    tpm_ek: str = "auto"
    # --aws-iam: join through the token `token_id` with the machine's AWS identity, no secret.
    aws_iam: bool = False
    token_id: str = ""
    facts_root: Path = Path("/")
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    # Sleeps this long; True when told to stop meanwhile (the agent's SIGTERM), which ends the wait.
    sleep: Callable[[float], bool] = field(default=lambda seconds: _plain_sleep(seconds))


def _plain_sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


class Backoff:
    """Exponential backoff with jitter, capped: 1, 2, 4 ... 60 s, each drawn between half and all of
    it, so machines that lost their server together do not come back in step."""

    def __init__(self, base: float = 1.0, cap: float = MAX_BACKOFF) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def next(self, at_least: float = 0.0) -> float:  # at_least: a busy server's Retry-After
        ceiling = min(self.cap, self.base * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return max(ceiling * random.uniform(0.5, 1.0), at_least)

    def reset(self) -> None:
        self.failures = 0


def retryable(failed: ApiError) -> bool:
    """Worth asking again later, unchanged: a busy or failing server (5xx, 429, UNAVAILABLE...)."""
    return failed.transient or failed.status >= 500


@dataclass
class _Wait:
    started: float = field(default_factory=time.monotonic)
    request_id: str = ""
    expires_at: str = ""
    clock_offset: float = 0.0  # server clock minus ours
    announced: bool = False

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Agent:
    def __init__(self, options: JoinOptions) -> None:
        self.o = options
        self.client = Client(options.url, timeout=options.timeout)
        self.tpm: tpm.Tpm | None = None
        self.attestation: tpm.Attestation | None = None
        self.aws: aws_iam.Signer | None = None

    def say(self, text: str = "") -> None:
        if self.o.output != "json":
            print(text, file=self.o.out, flush=True)

    def complain(self, text: str) -> None:
        print(text, file=self.o.err, flush=True)

    # --- the key ---------------------------------------------------------------------------

    def _stored_key(self) -> MachineKey | None:
        try:
            stored = statedir.read(self.o.directory, statedir.KEY)
            if stored is None:
                return None
            return MachineKey.load(stored.encode())
        except ValueError as bad:  # UnicodeDecodeError too
            raise CliError(f"{self.o.directory / statedir.KEY}: {bad}", Exit.USAGE) from None

    def _key(self, hostname: str, *, persist: bool) -> tuple[MachineKey, str]:
        directory = self.o.directory
        key = None if self.o.new_key else self._stored_key()
        if key is not None:
            csr = statedir.read(directory, statedir.CSR)
            if csr is not None and csr_matches(csr, key):
                return key, csr
        else:
            key = MachineKey.generate()
            if persist:
                statedir.write_file(directory, statedir.KEY, statedir.content(statedir.KEY, key.pem()))
        csr = key.csr(hostname)
        if persist:
            statedir.write_file(directory, statedir.CSR, statedir.content(statedir.CSR, csr))
        return key, csr

    # --- join ------------------------------------------------------------------------------

    def join(self, *, lock_held: bool = False) -> Exit:
        """Join; `lock_held` when the caller (the agent service) already holds DIR's lock."""
        if self.o.aws_iam and self.aws is None:
            from joinplane_cli import aws_iam

            aws_iam.check_url(self.o.url)
            self.aws = aws_iam.Signer()
        # With --tpm the EK is attested below; the facts' unproven EK hash would only be noise.
        facts = machine_facts.collect(self.o.facts_root, tpm_ek=not self.o.tpm)
        with self._tpm_attestation():
            if self.o.dry_run:
                return self._dry_run(facts)
            if lock_held:
                return self._join_held(facts)
            try:
                with statedir.locked(self.o.directory):
                    return self._join_held(facts)
            except statedir.Busy as busy:
                raise CliError(str(busy), Exit.USAGE) from None

    @contextlib.contextmanager
    def _tpm_attestation(self) -> Iterator[None]:
        """With --tpm: the TPM, and an EK and AK of it, for every join call of this run."""
        if not self.o.tpm:
            yield
            return
        with tpm.Tpm.open() as device:
            kind = tpm.choose_kind(device, self.o.tpm_ek)
            self.tpm, self.attestation = device, device.attestation(kind)
            try:
                yield
            finally:
                self.tpm = self.attestation = None

    def _join_held(self, facts: machine_facts.Facts) -> Exit:
        try:
            recovered = statedir.recover(self.o.directory)
            if recovered:
                self.say(f"Recovered {self.o.directory}: {recovered}.")
            self._refuse_if_joined()
            statedir.ensure(self.o.directory)
            key, csr = self._key(facts.hostname, persist=True)
        except OSError as failed:
            raise CliError(f"{self.o.directory}: {failed.strerror or failed}", Exit.USAGE) from None
        except UnicodeDecodeError:
            raise CliError(f"{self.o.directory}: a file in it is not text", Exit.USAGE) from None
        return self._join_loop(facts, key, csr)

    def _refuse_if_joined(self) -> None:
        if self.o.rejoin:
            return
        machine = statedir.read(self.o.directory, statedir.MACHINE)
        if machine is None or statedir.read(self.o.directory, statedir.TOKEN) is None:
            return
        try:
            machine_id = json.loads(machine).get("machineId", "?")
        except (ValueError, AttributeError):
            machine_id = "?"
        raise CliError(
            f"{self.o.directory} already holds the identity of machine {machine_id}. "
            "Use `joinplane renew` for a new certificate, or `join --rejoin` to join again with this key.",
            Exit.USAGE,
        )

    def _body(self, facts: machine_facts.Facts, csr: str) -> dict[str, Any]:
        body = {**facts.request_fields(), "csr": csr}
        if self.attestation is not None:
            body["tpm"] = self.attestation.fields()
        return body

    def _dry_run(self, facts: machine_facts.Facts) -> Exit:
        # The stored key, if any, so the verdict is the one this machine's next join would get.
        key = self._stored_key() or MachineKey.generate()
        body = {**self._body(facts, key.csr(facts.hostname)), "dryRun": True}
        response = self._post_attested(body, key)
        verdict = str(response.body.get("verdict", "")) or ("admit" if response.body.get("ok") else "deny")
        listed = response.body.get("reasons")
        reasons = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
        if self.o.output == "json":
            render.print_json(
                {"verdict": verdict, "reasons": reasons, "message": response.body.get("errMsg", "")},
                self.o.out,
            )
        else:
            self.say(f"Dry run: the server would {verdict.upper()} this join. Nothing was recorded.")
            self.say(f"  machine  {facts.summary()}")
            for reason in reasons:
                self.say(
                    f"  {reason.get('attestor', '?')}: {reason.get('message', '')} ({reason.get('code', '')})"
                )
            if not reasons and response.body.get("errMsg"):
                self.say(f"  {response.body['errMsg']}")
        return {"admit": Exit.OK, "defer": Exit.PENDING}.get(verdict, Exit.DENIED)

    def _post_join(self, body: dict[str, Any], key: MachineKey) -> Response:
        """One join call, with the quick retries every client owes a transient failure (more of them
        for a throttle, api.Retry). Every call proves fresh possession of the key: a re-join or the
        join that consumes an approval needs it, and the agent cannot know beforehand which one this is."""
        # An --aws-iam join names its token by id, and signs its AWS request again for every call.
        token = self.o.token_id if self.aws is not None else self.o.token or ""
        return self.client.post(
            "/machines/join",
            self.aws.joining(body, self.o.token_id, key.public_key_sha256())
            if self.aws is not None
            else body,
            bearer=self.o.token or None,
            proof=lambda raw: key.proof("join", token, raw),
            retry=Retry(attempts=QUICK_RETRIES, sleep=self._sleep_or_stop),
        )

    def _sleep_or_stop(self, seconds: float) -> None:
        if self.o.sleep(seconds):
            raise KeyboardInterrupt

    def _post_attested(self, body: dict[str, Any], key: MachineKey) -> Response:
        """One join call; with --tpm, a `tpmChallenge` in the answer is activated by the TPM and the
        call made again with the recovered secret (signed by the key, as every join call is). A
        deferred join's later polls go without the secret: the server asks again if it must."""
        response = self._post_join(body, key)
        for _ in range(MAX_TPM_CHALLENGES):
            challenge = response.body.get("tpmChallenge") if response.status == 202 else None
            if challenge is None or self.tpm is None or self.attestation is None:
                return response
            try:
                credential = tpm.challenge_credential(challenge)
            except ValueError as wrong:
                raise CliError(f"the server's TPM challenge is unusable: {wrong}", Exit.ERROR) from None
            secret = self.tpm.activate(self.attestation, credential)
            answer = {**body["tpm"], "activation": {"secret": base64.b64encode(secret).decode()}}
            response = self._post_join({**body, "tpm": answer}, key)
        raise CliError(
            f"the server asked for a TPM activation {MAX_TPM_CHALLENGES} times in a row without deciding",
            Exit.ERROR,
        )

    def _join_loop(self, facts: machine_facts.Facts, key: MachineKey, csr: str) -> Exit:
        body = self._body(facts, csr)
        self.say(f"Joining {self.o.url} as {facts.summary()}")
        for what, why in facts.skipped:
            self.say(f"  not reported: {what} ({why})")
        wait = _Wait()
        # JSON on stdout must stay parseable: progress then goes to stderr.
        status = StatusLine(self.o.err if self.o.output == "json" else self.o.out)
        backoff = Backoff()
        try:
            while True:
                try:
                    response = self._post_attested(body, key)
                    backoff.reset()
                except ApiError as failed:
                    if failed.code == "PERMISSION_DENIED":
                        status.done()
                        return self._denied(classify_denial(failed))
                    if failed.code == "UNAUTHENTICATED" and failed.reason in PROOF_REASONS:
                        status.done()
                        raise CliError(
                            f"The server refused this machine's proof of its key: {failed.server_message}",
                            Exit.UNAUTHENTICATED,
                        ) from None
                    if failed.reason == TPM_ACTIVATION_FAILED:
                        status.done()
                        raise CliError(
                            "The server refused the TPM's credential activation (the challenge expired, "
                            "or this TPM does not hold the EK it presented); run the same join again.",
                            Exit.TPM_REFUSED,
                        ) from None
                    if failed.reason == TPM_ACTIVATION_REQUIRED:
                        status.done()
                        raise CliError(
                            "This machine joined with its TPM, and the join token requires the same TPM "
                            "again to re-join: run the join with --tpm.",
                            Exit.TPM_REFUSED,
                        ) from None
                    if failed.reason in AWS_REASONS:
                        status.done()
                        why = f"The server refused this machine's AWS identity: {failed.server_message}"
                        code = Exit.UNAUTHENTICATED if failed.code == "UNAUTHENTICATED" else Exit.ERROR
                        raise CliError(why, code) from None
                    if failed.code == "UNAUTHENTICATED":
                        status.done()
                        raise CliError(
                            "The join token was refused (unknown, revoked, expired or used up"
                            + (", or without AWS rules" if self.o.aws_iam else "")
                            + "). Ask an operator for a new one (`joinplane tokens create`"
                            + (" --aws-account ..." if self.o.aws_iam else "")
                            + ").",
                            Exit.UNAUTHENTICATED,
                        ) from None
                    # Waiting (the agent, or join --wait) outlasts a busy or failing server, at boot too.
                    if not ((self.o.service or self.o.wait) and retryable(failed)) or self._out_of_time(wait):
                        raise
                    busy = f"server busy ({failed.code})"
                    self._pause(status, wait, self._retry_in(backoff, wait, failed), busy, jitter=False)
                    continue
                except Unreachable as down:
                    if not (self.o.service or self.o.wait) or self._out_of_time(wait):
                        raise
                    state = f"server unreachable: {down.reason}"
                    self._pause(status, wait, self._retry_in(backoff, wait), state, jitter=False)
                    continue
                if response.status == 200 and response.body.get("ok"):
                    status.done()
                    return self._admitted(response, key, csr)
                if response.status == 202 and isinstance(response.body.get("joinRequest"), dict):
                    request = response.body["joinRequest"]
                    wait.request_id = str(request.get("requestId", ""))
                    wait.expires_at = str(request.get("expiresAt", ""))
                    wait.clock_offset = response.now() - time.time()
                    if not wait.announced:
                        self._announce(response)
                        wait.announced = True
                        if not self.o.wait:
                            self.say(
                                "Run the same command again once it is approved (or add --wait to keep "
                                f"asking); the key in {self.o.directory} is kept for that."
                            )
                            return Exit.PENDING
                    if self.o.max_wait is not None and wait.elapsed() >= self.o.max_wait:
                        status.done()
                        waited = _words(wait.elapsed())
                        self.say(f"Gave up waiting after {waited}; {wait.request_id} is still pending.")
                        return Exit.PENDING
                    interval = (
                        self.o.poll_interval
                        if self.o.poll_interval is not None
                        else retry_after(response.body.get("retryAfterSeconds"))
                    )
                    self._pause(status, wait, interval, "pending")
                    continue
                raise CliError(
                    f"unexpected answer from the server (HTTP {response.status}): "
                    f"{render.cell(str(response.body.get('errMsg') or response.body)[:200])}"
                )
        except KeyboardInterrupt:
            status.done()
            if wait.request_id:
                self.complain(
                    f"Stopped waiting. Join request {wait.request_id} stays pending; run the same command "
                    "again to keep waiting (the key is kept)."
                )
            else:
                self.complain("Interrupted.")
            return Exit.INTERRUPTED

    def _retry_in(self, backoff: Backoff, wait: _Wait, failed: ApiError | None = None) -> float:
        """The next backoff pause, no sooner than a busy server asked, cut short where --max-wait ends."""
        delay = backoff.next((failed.retry_after or 0.0) if failed is not None else 0.0)
        if self.o.max_wait is not None:
            delay = min(delay, max(self.o.max_wait - wait.elapsed(), 0.0))
        return delay

    def _out_of_time(self, wait: _Wait) -> bool:
        """--max-wait ran out: a server still unreachable or failing then is reported as such."""
        return self.o.max_wait is not None and wait.elapsed() >= self.o.max_wait

    def _pause(
        self, status: StatusLine, wait: _Wait, seconds: float, state: str, *, jitter: bool = True
    ) -> None:
        """Sleep `seconds` (plus jitter unless the caller drew its own), keeping the status line
        current; a stop request (the agent's SIGTERM) ends it as Ctrl-C would."""
        until = time.monotonic() + seconds * (1 + (random.random() * JITTER if jitter else 0.0))
        first = True
        while True:
            left = until - time.monotonic()
            if left <= 0 and not first:
                return
            now = time.time() + wait.clock_offset
            expires = f", request expires {render.until(wait.expires_at, now)}" if wait.expires_at else ""
            text = (
                f"[waited {_words(wait.elapsed())}] {wait.request_id or 'join'}: {state}{expires}; "
                f"next check in {math.ceil(max(left, 0))}s"
            )
            status.show(text, tick=not first)
            first = False
            if left <= 0:
                return
            if self.o.sleep(min(left, 1.0)):
                raise KeyboardInterrupt

    def _announce(self, response: Response) -> None:
        request = response.body["joinRequest"]
        # The server's words as sent: its wording is not an interface, so nothing is read out of it.
        message = response.body.get("errMsg")
        self.say(render.cell(message) if isinstance(message, str) and message.strip() else "Join deferred.")
        request_id, expires = request.get("requestId"), request.get("expiresAt")
        self.say(f"  request  {request_id}")
        self.say(f"  expires  {expires} ({render.until(expires, response.now())})")
        # The pool (or, for a site token, the site whose pools may claim it), when the server names it.
        pool, site = request.get("poolId"), request.get("siteId")
        where = f" of pool {pool}" if pool else f" of a pool of site {site}" if site else ""
        self.say(f"An operator{render.cell(where) if where else ''} decides it with:")
        # A site's unclaimed request is approved into a pool the operator names (approving claims it).
        into = "" if pool or not site else f" --pool <a pool of site {site}>"
        self.say(f"  joinplane requests approve {request_id}{into}")
        self.say(f"  joinplane requests reject {request_id} --reason '...'")
        if self.o.output == "json":
            render.print_json(
                {
                    "state": "pending",
                    "requestId": request.get("requestId"),
                    "expiresAt": request.get("expiresAt"),
                },
                self.o.out,
            )

    def _denied(self, denial: Denial) -> Exit:
        self.complain(denial.headline)
        if denial.exit_code == Exit.REJECTED:
            self.complain(f"Reason: {denial.reason or '(the operator gave none)'}")
        elif denial.reason:
            self.complain(f"Reason: {denial.reason}")
        if denial.exit_code in (Exit.REJECTED, Exit.EXPIRED):
            self.complain(
                "This key cannot ask again. To start over, get a new join token and run "
                "`joinplane join --new-key` (or use a new --dir)."
            )
        return denial.exit_code

    def _admitted(self, response: Response, key: MachineKey, csr: str) -> Exit:
        body = response.body
        problems: list[str] = []
        token = body.get("machineToken")
        if not isinstance(token, str) or not _MACHINE_TOKEN.fullmatch(token):
            problems.append("machineToken is not a jpm_ token")
        issued = issuance.checked(body, key, problems)
        bootstrap = body.get("bootstrap")
        if not isinstance(bootstrap, dict):
            problems.append("bootstrap is not an object")
        if problems:
            # Nothing is recorded: an identity that cannot work is worse than none. The key stays,
            # so the same join again is matched to the machine the server admitted.
            raise CliError(
                f"the server admitted this machine but its answer is unusable ({'; '.join(problems)}); "
                f"nothing was recorded in {self.o.directory}. Run the same join again once the server "
                "is fixed: the key is kept, so it is admitted as the same machine.",
                Exit.ERROR,
            )
        machine = {
            "machineId": issued.machine_id,
            "workspaceId": issuance.text(body.get("workspaceId")),
            "poolName": issuance.text(body.get("poolName")),
            "url": self.o.url,
            "schedulable": body.get("schedulable") is True,
            "certificateExpiresAt": issued.expires_at,
            "certificateIssuedAt": render.rfc3339(response.now()),
            "joinedAt": render.rfc3339(response.now()),
        }
        files: dict[str, str | bytes] = {
            statedir.KEY: key.pem(),
            statedir.CSR: csr,
            statedir.CERTIFICATE: issued.certificate,
            statedir.CA: issued.ca_certificates,
            statedir.BOOTSTRAP: json.dumps(bootstrap, indent=2) + "\n",
            statedir.TOKEN: f"{token}\n",
            statedir.MACHINE: json.dumps(machine, indent=2) + "\n",
        }
        try:
            statedir.commit(self.o.directory, {n: statedir.content(n, d) for n, d in files.items()})
        except KeyboardInterrupt:
            # A Ctrl-C held back during the renames is delivered right after them: the identity is
            # in place, so report it rather than "stopped waiting".
            if statedir.read(self.o.directory, statedir.TOKEN) != files[statedir.TOKEN]:
                raise
        except OSError as failed:
            raise CliError(
                f"admitted as {machine['machineId']}, but {self.o.directory} could not be written "
                f"({failed.strerror or failed}); fix that and run the same join again: the server "
                "re-admits this key as the same machine with a new token",
                Exit.ERROR,
            ) from None
        if self.o.output == "json":
            render.print_json(
                {**machine, "state": "admitted", "directory": str(self.o.directory)}, self.o.out
            )
            return Exit.OK
        self.say(f'Admitted: this machine joined pool "{machine["poolName"]}" as {machine["machineId"]}.')
        render.fields(
            [
                ("machine", machine["machineId"]),
                ("workspace", machine["workspaceId"]),
                ("pool", machine["poolName"]),
                ("schedulable", machine["schedulable"]),
                (
                    "certificate",
                    f"expires {machine['certificateExpiresAt']} "
                    f"({render.until(machine['certificateExpiresAt'], response.now())})",
                ),
                ("directory", str(self.o.directory)),
                ("files", " ".join(files)),
            ],
            self.o.out,
        )
        return Exit.OK
