"""The in-database modules are layered: following a question from e_gather_find to the page, a
reader never goes back to a module already left. Each module imports only modules of the layers
below its own (pure: no server needed)."""

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
    ["lookups.threads"],
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
