"""`joinplane completion bash|zsh|fish`: completion scripts generated from the parser itself, so a new
command or option completes without anyone editing a script.

Commands, actions, options and option choices (`--state pending`, `-o json`) complete; options that
take a file (`--token-file`, `--chain`...) complete file names, `--dir` directories. Pool ids (`--pool`,
`pools get POOL_ID`), request ids (`requests approve REQUEST_ID...`) and machine ids are asked of the
server by the `joinplane` being completed, with the `--url`, `--api-key`, `--profile`... already typed
on the line and a short `--timeout`: nothing is offered when it cannot answer. zsh uses the bash
script through `bashcompinit`, which every zsh ships.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")
_FILES = frozenset(
    {
        "--token-file",
        "--token-out",
        "--out",
        "--certificate",
        "--chain",
        "--bundle-out",
        "--config",
        "--bootstrap",
    }
)
_DIRECTORIES = frozenset({"--dir"})
# Values the server knows: an option's, or a command's positional argument's (by its metavar), and
# the listing that names them (ids only, `-q`).
_ID_OPTIONS = {"--pool": "pools"}
_ID_ARGUMENTS = {"POOL_ID": "pools", "REQUEST_ID": "requests", "MACHINE_ID": "machines"}
_LISTINGS = {
    "pools": "pools list --all -q",
    "requests": "requests list --all -q",
    "machines": "machines list --all -q --state active",
}
# The options a listing needs to reach the same server as the command being typed.
_CONNECTION = ("--url", "--api-key", "--tenant", "--profile", "--config")


@dataclass
class Level:
    """One command path (``""``, ``"requests"``, ``"requests list"``): what can follow it."""

    help: str = ""
    children: dict[str, str] = field(default_factory=dict)  # name -> help
    options: dict[str, str] = field(default_factory=dict)  # option -> help
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # option -> its values
    takes_value: set[str] = field(default_factory=set)
    ids: str | None = None  # what its positional argument names (`pools`, `requests`...), if anything


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def levels(parser: argparse.ArgumentParser) -> dict[str, Level]:
    found: dict[str, Level] = {}

    def visit(current: argparse.ArgumentParser, path: str) -> None:
        level = found.setdefault(path, Level())
        for action in current._actions:
            for option in action.option_strings:
                level.options[option] = (action.help or "").replace("%(default)s", str(action.default))
                if action.nargs != 0:
                    level.takes_value.add(option)
                if action.choices and not isinstance(action, argparse._SubParsersAction):
                    level.choices[option] = tuple(str(c) for c in action.choices)
            if not action.option_strings and isinstance(action.metavar, str):
                level.ids = _ID_ARGUMENTS.get(action.metavar, level.ids)
        sub = _subparsers(current)
        if sub is None:
            return
        helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
        for name, child in sub.choices.items():
            level.children[name] = helps.get(name, "")
            visit(child, f"{path} {name}".strip())

    visit(parser, "")
    return found


def _words(values: Iterable[str]) -> str:
    return " ".join(values)


def bash(parser: argparse.ArgumentParser) -> str:
    table = levels(parser)
    valued = sorted({o for level in table.values() for o in level.takes_value})
    value_cases, word_cases = [], []
    for path, level in sorted(table.items()):
        for option, values in sorted(level.choices.items()):
            value_cases.append(
                f'        "{path}|{option}") COMPREPLY=($(compgen -W "{_words(values)}" -- "$cur")); return;;'
            )
        words = [*level.children, *sorted(o for o in level.options if o.startswith("--"))]
        word_cases.append(f'        "{path}") words="{_words(words)}";;')
    files = "|".join(f'*"|{option}"' for option in sorted(_FILES))
    directories = "|".join(f'*"|{option}"' for option in sorted(_DIRECTORIES))
    id_options = "\n".join(
        f'        *"|{option}") COMPREPLY=($(compgen -W "$(_joinplane_ids {kind})" -- "$cur")); return;;'
        for option, kind in sorted(_ID_OPTIONS.items())
    )
    id_arguments = "\n".join(
        f'        "{path}") COMPREPLY=($(compgen -W "$(_joinplane_ids {level.ids})" -- "$cur")); return;;'
        for path, level in sorted(table.items())
        if level.ids
    )
    listings = "\n".join(f"        {kind}) set -- {words};;" for kind, words in sorted(_LISTINGS.items()))
    connection = "|".join(_CONNECTION)
    return f"""\
# joinplane completion for bash (and zsh through bashcompinit): source <(joinplane completion bash)
_joinplane_ids() {{
    # The ids a listing names, asked of the server the line being typed would reach.
    local -a reach=()
    local i word
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        case "$word" in
            {connection}) reach+=("$word" "${{COMP_WORDS[i+1]}}");;
            {"|".join(o + "=*" for o in _CONNECTION)}) reach+=("$word");;
        esac
    done
    case "$1" in
{listings}
    esac
    "${{COMP_WORDS[0]}}" "${{reach[@]}}" "$@" --timeout 3s 2>/dev/null
}}
_joinplane() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    local path="" depth=0 skip=0 i word words=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        if ((skip)); then skip=0; continue; fi
        case "$word" in
            {"|".join(valued)}) skip=1; continue;;
            -*) continue;;
        esac
        if ((depth < 2)); then path="${{path:+$path }}$word"; depth=$((depth + 1)); fi
    done
    case "$path|$prev" in
{chr(10).join(value_cases)}
        {files}) COMPREPLY=($(compgen -f -- "$cur")); return;;
        {directories}) COMPREPLY=($(compgen -d -- "$cur")); return;;
{id_options}
    esac
    if [[ $cur != -* ]]; then
        case "$path" in
{id_arguments}
        esac
    fi
    case "$path" in
{chr(10).join(word_cases)}
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -F _joinplane joinplane
"""


def zsh(parser: argparse.ArgumentParser) -> str:
    return (
        "# joinplane completion for zsh: source <(joinplane completion zsh)\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser).split("\n", 1)[1]
    )


def _fish_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_listing(kind: str) -> str:
    # fish cannot easily pass on the options already typed; the environment and the profile apply.
    return f"(joinplane {_LISTINGS[kind]} --timeout 3s 2>/dev/null)"


def fish(parser: argparse.ArgumentParser) -> str:
    table = levels(parser)
    commands = table[""].children
    lines = [
        "# fish: joinplane completion fish > ~/.config/fish/completions/joinplane.fish",
        "complete -c joinplane -f",
        f"complete -c joinplane -n '__fish_use_subcommand' -l version -d {_fish_text('print the version')}",
    ]
    for name, text in commands.items():
        lines.append(f"complete -c joinplane -n '__fish_use_subcommand' -a {name} -d {_fish_text(text)}")
    for path, level in sorted(table.items()):
        if not path:
            continue
        parts = path.split()
        condition = f"__fish_seen_subcommand_from {parts[0]}"
        if len(parts) == 1 and level.children:
            condition += f"; and not __fish_seen_subcommand_from {_words(level.children)}"
        elif len(parts) == 2:
            condition += f"; and __fish_seen_subcommand_from {parts[1]}"
        for child, text in level.children.items():
            lines.append(f"complete -c joinplane -n '{condition}' -a {child} -d {_fish_text(text)}")
        if level.ids:
            lines.append(f"complete -c joinplane -n '{condition}' -a {_fish_text(_fish_listing(level.ids))}")
        for option, text in sorted(level.options.items()):
            if not option.startswith("--") or option == "--help":
                continue
            spec = f"-l {option[2:]}"
            if option in level.choices:
                spec += f" -xa {_fish_text(_words(level.choices[option]))}"
            elif option in _ID_OPTIONS:
                spec += f" -xa {_fish_text(_fish_listing(_ID_OPTIONS[option]))}"
            elif option in _DIRECTORIES:
                spec += " -xa '(__fish_complete_directories)'"
            elif option in _FILES:
                spec += " -rF"
            elif option in level.takes_value:
                spec += " -x"
            lines.append(f"complete -c joinplane -n '{condition}' {spec} -d {_fish_text(text)}")
    return "\n".join(lines) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](parser)
