"""The in-database modules are layered: following a question from e_gather_find to the page, a
reader never goes back to a module already left. Each module imports only modules of the layers
below its own (pure: no server needed). The client (emem_client) is layered the same way, from the
front ends down to what every call shares: no two of its modules import each other."""

import ast
from pathlib import Path

from checkout import ROOT

PACKAGE = ROOT / "plpython" / "emem_db"

# From the top (the pipeline) to the bottom (what everything shares).
LAYERS = [
    ["find"],
    ["settings", "totals"],
    ["profile"],
    ["registry"],
    ["lookups.threads", "lookups.links", "lookups.neighbours"],
    ["lookups.tags", "lookups.fulltext", "lookups.vectors"],
    ["lookups.edges"],
    ["lists.tiered"],
    ["lists.broad", "lists.scored", "lists.fetched"],
    ["lists.base"],
    ["plans"],
    ["reader"],
    ["sets"],
    ["fragments", "entry"],
    ["analysis", "tuning", "merge"],
    ["lexicon", "stopwords", "_version"],
]
LAYER_OF = {module: depth for depth, modules in enumerate(LAYERS) for module in modules}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The emem_db modules a module imports (a package import counts as its modules named)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("emem_db"):
            base = node.module.removeprefix("emem_db").lstrip(".")
            found |= {
                f"{base}.{a.name}".lstrip(".") if f"{base}.{a.name}".lstrip(".") in LAYER_OF else base
                for a in node.names
            }
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("emem_db.") for a in node.names if a.name.startswith("emem_db.")}
    return {name for name in found if name}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if module_name(p) not in ("", "lists", "lookups"))


def test_every_module_has_a_layer() -> None:
    assert {module_name(p) for p in modules()} == set(LAYER_OF)


def test_modules_import_only_layers_below_their_own() -> None:
    upward = [
        f"{module_name(p)} imports {name}"
        for p in modules()
        for name in sorted(imported(p))
        if LAYER_OF[name] <= LAYER_OF[module_name(p)]
    ]
    assert not upward


def test_every_module_opens_with_a_comment_saying_its_job() -> None:
    assert all(ast.get_docstring(ast.parse(p.read_text())) for p in PACKAGE.rglob("*.py"))


# ---- the client --------------------------------------------------------------------------------------

CLIENT = ROOT / "emem_client"

# From the front ends to what every module shares.
CLIENT_LAYERS = [
    ["cli"],
    ["http", "mcp_server"],
    ["service_settings"],
    ["integrations.langchain", "integrations.llamaindex"],
    ["integrations"],
    ["service"],
    ["embed", "ingest", "__init__"],
    ["sources", "aio", "gateway_options"],
    ["client", "documents", "units"],
    ["calls", "access", "setup_defaults"],
    ["gateways", "types"],
    ["embedded_model"],
]
CLIENT_LAYER_OF = {module: depth for depth, modules in enumerate(CLIENT_LAYERS) for module in modules}


def client_module_name(path: Path) -> str:
    parts = path.relative_to(CLIENT).with_suffix("").parts
    if parts == ("__init__",):
        return "__init__"
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def client_imports(path: Path) -> set[str]:
    """The emem_client modules a module imports anywhere (in functions too); `from emem_client import X`
    counts as module X when X is one, else as the package itself (__init__)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "emem_client":
            found |= {a.name if a.name in CLIENT_LAYER_OF else "__init__" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("emem_client."):
            found.add(node.module.removeprefix("emem_client."))
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("emem_client.") for a in node.names if a.name.startswith("emem_client.")}
    return found


def client_modules() -> list[Path]:
    return sorted(CLIENT.rglob("*.py"))


def test_every_client_module_has_a_layer() -> None:
    assert {client_module_name(p) for p in client_modules()} == set(CLIENT_LAYER_OF)


def test_client_modules_import_only_layers_below_their_own() -> None:
    upward = [
        f"{client_module_name(p)} imports {name}"
        for p in client_modules()
        for name in sorted(client_imports(p))
        if CLIENT_LAYER_OF[name] <= CLIENT_LAYER_OF[client_module_name(p)]
    ]
    assert not upward
