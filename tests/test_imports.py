"""The project's modules import without circles (deferred imports inside functions included), each
imports on its own, and no client module imports a server module."""

import ast
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedapp", "strategies", "clients")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``name`` imports anywhere in its body, except under ``if TYPE_CHECKING``.
    Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for child in node.body for n in ast.walk(child)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known
    found.discard(name)
    return found


def test_no_import_circles():
    mods = modules()
    graph = {name: imports(name, path, set(mods)) for name, path in mods.items()}
    # a package's own __init__ importing its submodules is how packages work, not a circle
    graph = {n: {m for m in deps if not m.startswith(n + ".")} for n, deps in graph.items()}
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_clients_import_no_server_module():
    mods = modules()
    bad = {n: sorted(d for d in imports(n, p, set(mods)) if d.split(".")[0] == "strategies")
           for n, p in mods.items() if n.startswith("clients")}
    assert {n: d for n, d in bad.items() if d} == {}


def test_servers_import_only_client_classes():
    """A server module takes its client class from clients/ (the registry pairs them) and its maths and
    networks from shared modules: every name it imports from clients/ is a FedClient subclass."""
    from clients.base import FedClient

    offenders = []
    for name, path in modules().items():
        if not name.startswith("strategies"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clients"):
                module = __import__(node.module, fromlist=["_"])
                offenders += [f"{name}: {node.module}.{a.name}" for a in node.names
                              if not (isinstance(getattr(module, a.name), type)
                                      and issubclass(getattr(module, a.name), FedClient))]
    assert offenders == []


def test_each_module_imports_on_its_own():
    """Each project module imported with no other project module loaded (third-party ones stay
    loaded: torch cannot be imported twice); the loaded modules are put back afterwards."""
    ours = lambda m: m.split(".")[0] in PACKAGES  # noqa: E731
    saved = {m: mod for m, mod in sys.modules.items() if ours(m)}
    try:
        for name in sorted(modules()):
            for m in [m for m in sys.modules if ours(m)]:
                del sys.modules[m]
            importlib.import_module(name)
    finally:
        for m in [m for m in sys.modules if ours(m)]:
            del sys.modules[m]
        sys.modules.update(saved)
