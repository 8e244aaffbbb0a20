"""The project's modules import without circles (deferred imports inside functions included; for the
fedapp modules type-only ones too), each imports on its own, no client module imports a server module,
and the run-config core imports no algorithm and no app."""

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


def imports(name: str, path: Path, known: set[str], type_only: bool = False) -> set[str]:
    """Project modules ``name`` imports anywhere in its body, under ``if TYPE_CHECKING`` only with
    ``type_only``. Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``."""
    tree = ast.parse(path.read_text())
    skip = set() if type_only else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
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


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    mods = modules()
    graph = {name: imports(name, path, set(mods), type_only) for name, path in mods.items()}
    # a package's own __init__ importing its submodules is how packages work, not a circle
    return {n: {m for m in deps if not m.startswith(n + ".")} for n, deps in graph.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
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
    return cycles


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_no_fedapp_module_in_an_import_circle_type_only_imports_counted():
    """A type-only import is a dependency too: no circle passes through a fedapp module (the run
    config and the registry, say) even counting the imports under ``if TYPE_CHECKING``."""
    assert [c for c in circles(import_graph(type_only=True)) if any(m.startswith("fedapp") for m in c)] == []


def test_run_config_core_imports_no_algorithm_and_no_app():
    """fedapp.core.config, and all it imports (type-only and deferred imports included), reaches no
    strategy, client, registry or app: the registry adds the algorithms' keys from above."""
    graph, seen, todo = import_graph(type_only=True), set(), ["fedapp.core.config"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph[name]
    above = {"fedapp.runtime.registry", "fedapp.runtime.server_app", "fedapp.runtime.client_app", "fedapp.runtime.inprocess", "fedapp.runtime.launch"}
    assert sorted(m for m in seen if m.split(".")[0] in ("strategies", "clients") or m in above) == []


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
