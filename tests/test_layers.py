"""The layer rule of the Rust crate (docs/architecture.md): a module never imports from a layer
above its own, and the modules import each other without circles.

It reads every ``crate::module`` path in the code of ``src/`` (comments, doc links and
``#[cfg(test)]`` code left out: a lower layer's tests may load a checkpoint) and checks each
against :data:`LAYERS`. Inside a top-level module (``template/``, ``text/``, ``render/``...)
files use ``super::`` freely; the rule is about modules. A new module must be placed in a layer
here, or the test fails.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

#: Bottom to top. A module may import from its own layer and every layer below.
LAYERS: list[tuple[str, list[str]]] = [
    ("utilities", ["error", "pystr"]),
    ("text encoders and the template engine", ["text", "template"]),
    ("the conversation and the piece stream", ["message", "pieces"]),
    ("checkpoint loading and control tokens", ["checkpoint", "control_tokens"]),
    ("the piece encoder", ["piece_encoder"]),
    ("completion grammars and the parser that reads a completion back", ["completion"]),
    ("renderers: native formats, the Jinja path, probes, the format choice; mistral-common", ["render", "mistral_common"]),
    ("input preparation and the encoder's origin", ["input", "origin"]),
    ("the encoder facade", ["encoder"]),
    ("built on the encoder", ["batch", "training", "pairs", "session", "lint", "persist", "compiled", "packing"]),
    ("the bindings", ["python"]),
]
LAYER_OF = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}


def _module(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0][:-3] if len(rel) == 1 else rel[0]


def _code(text: str) -> str:
    """The code of a file: before its first ``#[cfg(test)]``, without comments."""
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    return "\n".join(re.sub(r"//.*", "", line) for line in text.splitlines())


def imports() -> dict[str, dict[str, list[str]]]:
    """module -> imported module -> the files that import it."""
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(SRC.rglob("*.rs")):
        module = _module(path)
        if module == "lib" or path.name == "tests.rs":
            continue
        for target in set(re.findall(r"\bcrate::([a-z_]+)", _code(path.read_text(encoding="utf-8")))):
            if target != module:
                out[module][target].append(str(path.relative_to(SRC)))
    return out


def test_every_module_has_a_layer() -> None:
    modules = {_module(p) for p in SRC.rglob("*.rs")} - {"lib"}
    assert sorted(modules - set(LAYER_OF)) == [], "place the new module in LAYERS (and docs/architecture.md)"


def test_no_module_imports_from_a_layer_above() -> None:
    upward = [
        f"{m} ({LAYERS[LAYER_OF[m]][0]}) imports {t} ({LAYERS[LAYER_OF[t]][0]}) in {', '.join(files)}"
        for m, targets in imports().items()
        for t, files in targets.items()
        if t in LAYER_OF and LAYER_OF[t] > LAYER_OF[m]
    ]
    assert len(imports()) > 10, "the reader found no imports"
    assert upward == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (module -> imported modules), each as a path."""
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    for m in sorted(graph):
        if m not in done:
            visit(m, [m])
    return found


def test_no_import_circles() -> None:
    assert cycles({m: set(t) for m, t in imports().items()}) == []


def test_the_checks_can_fail() -> None:
    """The reader sees a real import and ignores doc links and test code; a circle is found."""
    code = _code("//! see [`crate::encoder`]\nuse crate::encoder::Encoder; // crate::batch\n#[cfg(test)]\nuse crate::session;\n")
    assert re.findall(r"\bcrate::([a-z_]+)", code) == ["encoder"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


PACKAGE = SRC.parent / "python" / "chatids"


def _is_submodule(name: str) -> bool:
    """A module of the package (``_core`` is compiled: its stub stands for it)."""
    return (PACKAGE / f"{name}.py").exists() or (PACKAGE / f"{name}.pyi").exists()


def python_imports() -> dict[str, set[str]]:
    """Module of the Python package -> the package modules it imports when it runs (at the top
    or inside a function; ``if TYPE_CHECKING:`` blocks are type annotations, not imports)."""
    import ast

    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        name = path.stem
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, ast.ImportFrom) or node.level != 1:
                continue
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # from . import x, y: submodules by name, else the package itself
                found |= {a.name if _is_submodule(a.name) else "__init__" for a in node.names}
        out[name] = found - {name}
    return out


def test_no_import_circles_in_the_python_package() -> None:
    graph = python_imports()
    assert graph["_cli"] and graph["_encoder"], "the reader found no imports"
    # The package's __init__ imports the public modules; a module that imports the package
    # (`from . import Encoder`) is above all of them, so it is one more node.
    assert cycles(graph) == []
