"""The rooms of ARCHITECTURE.md and what each may import, checked on the source (no imports run).

Each rule is a sentence of ARCHITECTURE.md: when one fails, either the code strayed or the rule
changed, and then ARCHITECTURE.md changes with it.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ROOT / "layers" / "domain"
FUNCTIONS = ROOT / "functions"

# Imported by everything, import nothing of the domain but each other.
FOUNDATION = {
    "container", "errors", "ids", "clock", "settings", "aws", "deadline", "credentials", "der",
    "spiffe", "routes", "wire", "observe",
}  # fmt: skip
# Wire dialects: bytes in, models out; domain errors in, responses out. Never the table.
DIALECTS = {"http", "operator_api", "join_wire", "clusters.sylve_wire"}
# Decisions over facts handed to them: no clock, no AWS, no table.
PURE = {"join_decide", "attestors", "aws_rules", "grants", "hardware", "clusters.inventory"}
# The certificate code: the only modules that import `cryptography` when they are imported.
CERTIFICATE_CODE = {"ca", "ca_keys", "csr_checks", "machine_certificates"}


@dataclass(frozen=True)
class Import:
    module: str  # the imported module, relative to `joinplane.` when it is ours ("dal.pools")
    names: tuple[str, ...]  # for `from x import a, b`
    where: str  # "module" | "function" | "type-checking"


@functools.cache  # every rule reads the same sources
def imports_of(path: Path) -> list[Import]:
    found: list[Import] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = where
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                here = "type-checking"
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and where == "module":
                here = "function"
            if isinstance(child, ast.Import):
                found.extend(Import(_ours(a.name), (), here) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module:
                names = tuple(a.name for a in child.names)
                if child.module in ("joinplane", "joinplane.dal", "joinplane.clusters", "joinplane.contract"):
                    # `from joinplane import pools` imports the module joinplane.pools
                    base = _ours(child.module)
                    found.extend(Import(f"{base}.{n}".lstrip("."), (), here) for n in names)
                else:
                    found.append(Import(_ours(child.module), names, here))
            visit(child, here)

    visit(ast.parse(path.read_text()), "module")
    return found


def _ours(module: str) -> str:
    return module.removeprefix("joinplane").lstrip(".") if module.startswith("joinplane") else module


def domain_modules() -> dict[str, Path]:
    package = DOMAIN / "joinplane"
    return {
        ".".join(p.relative_to(package).with_suffix("").parts): p
        for p in package.rglob("*.py")
        if p.name != "__init__.py"
    }


MODULES = domain_modules()
OURS = set(MODULES)


def our_imports(name: str) -> list[Import]:
    return [i for i in imports_of(MODULES[name]) if i.module in OURS]


def test_the_package_initialisers_are_empty() -> None:
    # Given every __init__.py of the layer; Then none runs code at import (cold start pays for it)
    for init in (DOMAIN / "joinplane").rglob("__init__.py"):
        assert init.read_text().strip() == "", init


@pytest.mark.parametrize("name", sorted(FOUNDATION))
def test_foundation_imports_only_foundation(name: str) -> None:
    strays = [i.module for i in our_imports(name) if i.module not in FOUNDATION]
    assert strays == [], f"{name} is a foundation module and imports {strays}"


@pytest.mark.parametrize("name", sorted(n for n in OURS if n.startswith("dal.")))
def test_the_data_access_layer_knows_nothing_above_it(name: str) -> None:
    # Repositories import the foundation and each other; a domain rule leaking in would make
    # the layer decide, which is the domain's job.
    strays = [
        i.module for i in our_imports(name) if not (i.module in FOUNDATION or i.module.startswith("dal."))
    ]
    assert strays == [], f"{name} imports {strays}"


@pytest.mark.parametrize("name", sorted(n for n in OURS if not n.startswith("dal.")))
def test_only_the_data_access_layer_calls_dynamodb(name: str) -> None:
    # Not even the retry loop: that is `deadline.attempts`, in the foundation.
    for imported in imports_of(MODULES[name]):
        assert imported.module != "dal.dynamo", f"{name} imports {imported.names} from dal.dynamo"
    source = MODULES[name].read_text()
    for layout in ('"pk"', '"sk"', '"gsi1pk"', "TENANT#", "JOINID#", "MACHINE#", "JOINTOKEN#"):
        assert layout not in source, f"{name} knows the table's layout ({layout}); that is the dal's"


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_dialects_never_touch_the_table(name: str) -> None:
    strays = [i.module for i in our_imports(name) if i.module.startswith("dal.")]
    assert strays == [], f"{name} imports {strays}"


def import_closure(name: str) -> dict[str, Import]:
    """Every module of ours that importing `name` (or calling it) loads, each with the import that
    loads it first: imports at module level and inside functions, followed transitively; imports
    under TYPE_CHECKING never run and are not followed. A module of `dal` is not followed: a record
    module imports `dal.dynamo` for its `Item` type and its repository functions, which a pure
    module may not call, so it may import records from there by class name only (checked below)."""
    seen: dict[str, Import] = {}
    todo = [name]
    while todo:
        importer = todo.pop()
        for imported in our_imports(importer):
            if imported.where == "type-checking" or imported.module in seen or imported.module == name:
                continue
            seen[imported.module] = imported
            if not imported.module.startswith("dal."):
                todo.append(imported.module)
    return seen


@pytest.mark.parametrize("name", sorted(PURE))
def test_decisions_are_pure(name: str) -> None:
    # Time and I/O are facts handed in: the decision is a function of its arguments, which is what
    # lets tests/join/test_join_decisions.py run it table-driven without moto. Purity belongs to the
    # whole import closure, not only to the direct imports: a helper that imports the clock brings it.
    closure = import_closure(name)
    for impure in ("clock", "aws", "dal.dynamo", "deadline", "settings"):
        assert impure not in closure, f"{name} loads {impure}"
    for module, imported in closure.items():
        if module.startswith("dal."):
            # records only: classes, never the repository's functions
            assert imported.names and all(n[0].isupper() for n in imported.names), (
                f"{name} loads {imported.names} from {module}"
            )


def test_views_are_for_type_checkers_and_the_openapi_generator_only() -> None:
    sources = [path for name, path in MODULES.items() if not _in_contract(name)]
    for path in [*sources, *FUNCTIONS.rglob("app.py")]:
        for imported in imports_of(path):
            views = ("views", "fact_views", "join_views", "policy_views")
            if imported.module in views and path.name not in tuple(f"{name}.py" for name in views):
                assert imported.where == "type-checking", f"{path} imports views at run time"


def test_event_details_are_for_type_checkers_and_the_schema_generator_only() -> None:
    # The detail types carry pydantic's annotations: the publisher's cold start never pays for them,
    # and no function loads the schema generator.
    details = {"event_details", "admin_event_details"}
    sources = [*MODULES.items(), *((str(p), p) for p in FUNCTIONS.rglob("app.py"))]
    for name, path in sources:
        for imported in imports_of(path):
            if imported.module in details and name not in {*details, "event_schemas"}:
                assert imported.where == "type-checking", f"{name} imports {imported.module} at run time"
            assert imported.module != "event_schemas", f"{name} imports the schema generator"
    assert not {*details, "event_schemas"} & set(import_closure("events"))


def _in_contract(name: str) -> bool:
    return name == "contract" or name.startswith("contract.")


def test_the_openapi_generator_is_imported_by_nothing_else() -> None:
    # joinplane.contract writes shared/openapi.json at build time: it imports pydantic's schema
    # machinery, every request model and every view. Given every module outside it
    for name in sorted(OURS):
        if _in_contract(name):
            continue
        # Then none imports it, even inside a function or for the type checker
        strays = [i.module for i in imports_of(MODULES[name]) if _in_contract(i.module)]
        assert strays == [], f"{name} imports {strays}"


@pytest.mark.parametrize("name", sorted(n for n in OURS if _in_contract(n)))
def test_the_openapi_generator_knows_nothing_of_the_table(name: str) -> None:
    # It describes what the API says, from the route table, the models, the views and the dialects'
    # constants: how answers are stored is no part of that.
    strays = [i.module for i in our_imports(name) if i.module.startswith("dal.")]
    assert strays == [], f"{name} imports {strays}"


@pytest.mark.parametrize("app", sorted(FUNCTIONS.rglob("app.py")), ids=lambda p: p.parent.name)
def test_no_function_reaches_the_openapi_generator(app: Path) -> None:
    # Cold start: given everything a function's handler loads, at import or when a route runs
    reached: set[str] = set()
    for imported in imports_of(app):
        if imported.where != "type-checking" and imported.module in OURS:
            reached |= {imported.module, *import_closure(imported.module)}
    # Then the generator is not among it
    assert sorted(m for m in reached if _in_contract(m)) == [], app


def test_cryptography_loads_only_with_the_certificate_code() -> None:
    # Cold start: only the certificate code imports cryptography when it is imported; others (proof,
    # tpm_allow) import it inside the function that needs it.
    for name, path in MODULES.items():
        at_import = [
            i for i in imports_of(path) if i.module.startswith("cryptography") and i.where == "module"
        ]
        assert name in CERTIFICATE_CODE or not at_import, f"{name} imports cryptography at module level"


@pytest.mark.parametrize("app", sorted(FUNCTIONS.rglob("app.py")), ids=lambda p: p.parent.name)
def test_handlers_are_thin(app: Path) -> None:
    # A handler binds routes to the domain; the table is the domain's business.
    for imported in imports_of(app):
        assert not imported.module.startswith("dal."), f"{app} imports {imported.module}"
    assert not ({p.name for p in app.parent.iterdir()} - {"app.py", "__pycache__"}), app.parent
