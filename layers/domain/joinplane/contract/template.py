"""template.yaml's HttpApi events, written from the route table: `python -m joinplane.contract.template`
adds, under its function's `Events:`, the event of every route of joinplane.routes the template
lacks, in the template's own one-line form. sam deploys from the YAML, so the YAML stays what it
reads, and tests/api/test_route_table.py checks it against the table.

It only adds. An event the table lacks, or one under another function or behind another
authorizer than its row says, is named for a person to fix: an event's name is part of the stack
(SAM names the function's invoke permission after it), so renaming or moving one is a deploy
decision, not a generator's. It works on the text, line by line, so the template's comments,
order and intrinsic functions (`!Ref`) stay as they were.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from joinplane.routes import ROUTES, Route

_RESOURCE = re.compile(r"^  (\w+):\s*$")
_EVENTS = re.compile(r"^ {6}Events:\s*$")
_EVENT_NAME = re.compile(r"^ {8}(\w+):\s*$")
_EVENT = re.compile(
    r'^ {10}Properties: \{ ApiId: !Ref HttpApi, Method: (\w+), Path: "?([^",\s]+)"?'
    r"(?:, Auth: \{ Authorizer: (\w+) \})? \}\s*$"
)
_AUTHORIZER = "ApiKeyAuthorizer"


class TemplateError(Exception):
    """The template cannot take the table's events as it stands; the message says what to fix."""


def event_name(route: Route) -> str:
    """A new event's name: the operationId after the resource, in CamelCase (`pools.destroy` ->
    `Destroy`, `clusters.nodes.drain` -> `NodesDrain`); an operationId without dots whole."""
    parts = route.operation.split(".")
    words = parts[1:] if len(parts) > 1 else re.split(r"[^A-Za-z0-9]+", route.operation)
    return "".join(word[:1].upper() + word[1:] for word in words)


def event_lines(route: Route, name: str) -> list[str]:
    auth = f", Auth: {{ Authorizer: {_AUTHORIZER} }}" if route.auth == "api-key" else ""
    # In a YAML flow mapping `{caId}` would be a mapping: such a path is quoted.
    path = f'"{route.path}"' if set(route.path) & set("{}[],:#") else route.path
    properties = f"ApiId: !Ref HttpApi, Method: {route.method}, Path: {path}{auth}"
    return [f"        {name}:\n", "          Type: HttpApi\n", f"          Properties: {{ {properties} }}\n"]


def _events_by_function(lines: list[str]) -> dict[tuple[str, str], tuple[str, bool]]:
    """(method, path) -> (the resource it is under, behind the API key authorizer) of every
    HttpApi event in the template's one-line form."""
    found: dict[tuple[str, str], tuple[str, bool]] = {}
    resource = ""
    for line in lines:
        if match := _RESOURCE.match(line):
            resource = match.group(1)
        elif match := _EVENT.match(line):
            found[(match.group(1), match.group(2))] = (resource, match.group(3) == _AUTHORIZER)
    return found


def _end_of_events(lines: list[str], function: str) -> tuple[int, set[str]]:
    """Where a new event goes in `function`'s `Events:` (after its last event), and the names
    its events have."""
    start = next((i for i, line in enumerate(lines) if line == f"  {function}:\n"), None)
    if start is None:
        raise TemplateError(f"template.yaml has no resource {function}: add the function first")
    events = None
    end = len(lines)
    for i in range(start + 1, len(lines)):
        if _RESOURCE.match(lines[i]) or (lines[i][:1].strip() and not lines[i].startswith(" ")):
            end = i
            break
        if _EVENTS.match(lines[i]):
            events = i
        elif events is not None and lines[i].strip() and not lines[i].startswith(" " * 7):
            end = i  # a key of Properties after Events
            break
    if events is None:
        raise TemplateError(f"{function} has no `Events:` in template.yaml: add one under its Properties")
    while end > events + 1 and not lines[end - 1].strip():
        end -= 1
    names = {m.group(1) for line in lines[events + 1 : end] if (m := _EVENT_NAME.match(line))}
    return end, names


def add_events(text: str, routes: tuple[Route, ...] = ROUTES) -> tuple[str, list[str], list[str]]:
    """The template with an event for every route it lacks; what was added; what a person must fix."""
    lines = text.splitlines(keepends=True)
    present = _events_by_function(lines)
    added: list[str] = []
    problems: list[str] = []
    for route in routes:
        where = present.get((route.method, route.path))
        if where is not None:
            if where != (route.function, route.auth == "api-key"):
                problems.append(
                    f"{route.method} {route.path}: the template has it under {where[0]}"
                    f"{' behind' if where[1] else ' without'} the API key authorizer; the table says "
                    f"{route.function}{' behind' if route.auth == 'api-key' else ' without'} it"
                )
            continue
        end, names = _end_of_events(lines, route.function)
        name = event_name(route)
        if name in names:
            raise TemplateError(f"{route.function} already has an event {name}: add {route.path} by hand")
        lines[end:end] = event_lines(route, name)
        added.append(f"{route.function}.{name}: {route.method} {route.path}")
    table = {(route.method, route.path) for route in routes}
    for (method, path), (function, _) in present.items():
        if (method, path) not in table:
            problems.append(f"{method} {path}: under {function} in the template, not in the table")
    return "".join(lines), added, problems


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "template.yaml")
    command = "python -m joinplane.contract.template"
    if not path.is_file():
        print(
            f"{command}: no {path} here: run it from the repository's root, or name the file", file=sys.stderr
        )
        return 2
    try:
        text, added, problems = add_events(path.read_text())
    except TemplateError as error:
        print(f"{command}: {error}", file=sys.stderr)
        return 1
    path.write_text(text)
    for line in added:
        print(f"added {line}")
    for problem in problems:
        print(f"{command}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
