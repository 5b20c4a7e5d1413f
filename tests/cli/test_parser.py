"""The command line itself: help on every option, --output json on every command, durations, the
version, and shell completion generated from the parser."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from joinplane_cli import completion, main, options
from joinplane_cli.api import ApiError
from joinplane_cli.version import VERSION
from tests.support.runtime import command


def _leaves(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield path, parser
        return
    for name, child in subparsers[0].choices.items():
        yield from _leaves(child, f"{path} {name}".strip())


LEAVES = dict(_leaves(main.build_parser()))


@pytest.mark.parametrize("path", sorted(LEAVES))
def test_every_option_and_argument_has_help(path: str) -> None:
    # Given one command, When its options are read, Then each one says what it is for
    for action in LEAVES[path]._actions:
        assert action.help and action.help.strip(), (
            f"joinplane {path}: {action.option_strings or action.dest}"
        )


@pytest.mark.parametrize("path", sorted(p for p in LEAVES if p != "completion"))
def test_every_command_takes_output_json(path: str) -> None:
    # Given one command that talks to the server, Then -o json is one of its options
    outputs = [a for a in LEAVES[path]._actions if "--output" in a.option_strings]
    assert outputs and "json" in (outputs[0].choices or ()), path


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("90m", 5400), ("1h", 3600), ("1h30m", 5400), ("1d", 86_400), ("2w", 1_209_600),
     ("1.5h", 5400), ("0", 0)],
)  # fmt: skip
def test_durations_read_as_a_person_writes_them(text: str, seconds: int) -> None:
    assert options.whole_seconds(text) == seconds


@pytest.mark.parametrize("text", ["1x", "h", "1h 30m", "-5m", "1d-1h", "", "1e400"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        options.whole_seconds(text)


def test_version_is_the_packages() -> None:
    done = subprocess.run([*command(), "--version"], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, f"joinplane {VERSION}\n")


BASH = """
source <("$@" completion bash)
t() {
    COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
    _joinplane; echo "${COMPREPLY[*]}"
}
t joinplane req
t joinplane requests ''
t joinplane requests list --st
t joinplane -o json requests list --pool gpu --state a
t joinplane pools create p1 --certificate-t
t joinplane agent --token-file %s/tok
"""


def test_bash_completes_commands_actions_options_choices_and_files(tmp_path: Path) -> None:
    # Given a file to complete and the generated bash script
    (tmp_path / "token.txt").write_text("jpt_x")
    # When bash completes partial command lines
    done = subprocess.run(
        ["bash", "-c", BASH % tmp_path, "bash", *command()], capture_output=True, text=True, check=False
    )
    # Then each completes to what the parser accepts there
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "requests",
        "list get approve reject --help",
        "--state",
        "approved all",
        "--certificate-ttl",
        f"{tmp_path}/token.txt",
    ]


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_every_shells_script_knows_every_command(shell: str) -> None:
    # Given the completion script of one shell, Then every command and action of the parser is in it
    text = completion.script(shell, main.build_parser())
    for path in LEAVES:
        for word in path.split():
            assert word in text, (shell, word)
    if shell == "fish":
        condition = "__fish_seen_subcommand_from requests; and __fish_seen_subcommand_from list"
        states = "pending approved rejected expired consumed all"
        assert f"complete -c joinplane -n '{condition}' -l state -xa '{states}'" in text
    if shell == "zsh":
        assert text.startswith("# joinplane completion for zsh") and "bashcompinit" in text


@pytest.mark.parametrize(
    ("profile", "said"),
    [
        ('timeout = "soon"', "[default] timeout: 'soon' is not a duration"),
        ('output = "yaml"', "[default] output must be table or json"),
        ('colour = "blue"', "[default] has an unknown key 'colour'"),
        ("url = [1, 2]", "[default] url must be a string"),
        ("url = ", "is not TOML"),
    ],
)
def test_a_config_file_that_cannot_be_used_is_a_usage_error_not_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    profile: str,
    said: str,
) -> None:
    # Given a default profile with one bad setting
    config = tmp_path / "config.toml"
    config.write_text(f"[default]\n{profile}\n")
    monkeypatch.setenv("JOINPLANE_CONFIG", str(config))
    # When any command runs
    code = main.main(["pools", "list", "--url", "http://127.0.0.1:9", "--api-key", "jpk_x", "--tenant", "t"])
    # Then it stops before sending anything, saying what is wrong where
    err = capsys.readouterr().err
    assert code == 2, err
    assert said in err and str(config) in err
    assert "Traceback" not in err


CHOSEN = {"url": "http://127.0.0.1:3000", "output": None, "timeout": None, "pool": "from-env"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-o", "json", "pools", "list"], {"output": "json", "pool": "from-env"}),
        (["pools", "list", "-o", "json"], {"output": "json"}),
        (["--profile", "lab", "--pool", "p1", "machines", "list"], {"profile": "lab", "pool": "p1"}),
        (["-o", "json", "pools", "list", "-o", "table"], {"output": "table"}),
        (["--timeout", "5s", "requests", "approve", "jreq_a", "jreq_b"], {"timeout": 5.0}),
        (["requests", "list"], {"output": "table", "url": "http://127.0.0.1:3000", "timeout": 30.0}),
    ],
)
def test_shared_options_count_before_the_command_and_after_it_wins(
    argv: list[str], expected: dict[str, object]
) -> None:
    # When a command line is parsed, Then each shared option holds what was typed, wherever it stood
    parsed = vars(main.build_parser(CHOSEN).parse_args(argv))
    assert {key: parsed[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("field", "reason", "said"),
    [
        ("ttlSeconds", "Input should be greater than or equal to 60", "--ttl: must be at least 1m"),
        ("ttlSeconds", "Input should be less than or equal to 2592000", "--ttl: must be at most 30d"),
        ("certificateTtlSeconds", "Input should be greater than or equal to 300",
         "--certificate-ttl: must be at least 5m"),
        ("maxUses", "Input should be less than or equal to 10000", "--max-uses: must be at most 10000"),
        ("bootstrap.telemetry.enabled", "Input should be a valid boolean",
         "--bootstrap (telemetry.enabled): Input should be a valid boolean"),
        ("somethingNew", "Field required", "somethingNew: Field required"),
    ],
)  # fmt: skip
def test_a_refused_field_is_said_as_the_option_that_sets_it(field: str, reason: str, said: str) -> None:
    # Given the server's refusal of one field
    refusal = ApiError(
        400, "INVALID_ARGUMENT", f"invalid request: {field}: {reason}", [{"field": field, "reason": reason}]
    )
    # When the CLI says it, Then it names the option, with durations in the options' units
    assert options.described(refusal) == [said]


def test_a_refusal_without_fields_is_said_as_the_server_said_it() -> None:
    refusal = ApiError(409, "INVALID_STATE", "join request is rejected")
    assert options.described(refusal) == ["INVALID_STATE: join request is rejected"]
