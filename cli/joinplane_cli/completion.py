"""`joinplane completion bash|zsh|fish`: completion scripts generated from the parser itself, so a new
command or option completes without anyone editing a script.

Commands, actions, options and option choices (`--state pending`, `-o json`) complete; options that
take a file (`--dir`, `--token-file`, `--chain`...) complete file names. zsh uses the bash script
through `bashcompinit`, which every zsh ships.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")
_FILES = frozenset(
    {"--dir", "--token-file", "--token-out", "--out", "--certificate", "--chain", "--bundle-out", "--config"}
)


@dataclass
class Level:
    """One command path (``""``, ``"requests"``, ``"requests list"``): what can follow it."""

    help: str = ""
    children: dict[str, str] = field(default_factory=dict)  # name -> help
    options: dict[str, str] = field(default_factory=dict)  # option -> help
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # option -> its values
    takes_value: set[str] = field(default_factory=set)


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
    return f"""\
# joinplane completion for bash (and zsh through bashcompinit): source <(joinplane completion bash)
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
    esac
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
        for option, text in sorted(level.options.items()):
            if not option.startswith("--") or option == "--help":
                continue
            spec = f"-l {option[2:]}"
            if option in level.choices:
                spec += f" -xa {_fish_text(_words(level.choices[option]))}"
            elif option in _FILES:
                spec += " -rF"
            elif option in level.takes_value:
                spec += " -x"
            lines.append(f"complete -c joinplane -n '{condition}' {spec} -d {_fish_text(text)}")
    return "\n".join(lines) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](parser)
