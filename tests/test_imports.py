"""The project's import graph keeps its layers: ``fedapp/core`` (what everything stands on) <-
``fedapp/server`` (the server's round machinery) <- ``strategies/`` and ``clients/`` (the algorithms)
<- ``fedapp/runtime`` (what runs them). No module
imports a higher layer (type-only and deferred imports counted), bar the exceptions named below; no
import circles; each module imports on its own; no client module imports a server module."""

import ast
import importlib
import subprocess
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


def test_no_import_circle_type_only_imports_counted():
    """A type-only import is a dependency too: the driver and the private round call the strategy
    through the hooks they declare (``fedapp.server.hooks.RoundHooks``, ``strategies.privacy.Wrapped``),
    not through an import of ``FedStrategy``, whose rounds run them."""
    assert circles(import_graph(type_only=True)) == []


def layer(module: str) -> int:
    """0: fedapp's core, 1: the server layer, 2: the algorithms, 3: fedapp's run-time layer
    (``fedapp.__main__``, the CLI, with it); the package ``fedapp`` itself is empty."""
    if module == "fedapp" or module.startswith("fedapp.core"):
        return 0
    if module.startswith("fedapp.server"):
        return 1
    if module.split(".")[0] in ("strategies", "clients"):
        return 2
    assert module == "fedapp.__main__" or module.startswith("fedapp.runtime"), f"{module}: in no layer"
    return 3


#: imports from a lower layer to a higher one that remain, and why
UPWARD = {
    # a strategy class learns its registered name and client from the table that pairs them, and
    # FedStrategy.run_config parses with the full schema (every algorithm's keys)
    ("strategies.base", "fedapp.runtime.registry"),
    ("strategies.settings", "fedapp.runtime.registry"),
    # the error line naming the strategies that take plain Flower ClientApps (deferred)
    ("fedapp.server.discovery", "fedapp.runtime.registry"),
}


def test_no_module_imports_a_higher_layer_type_only_imports_counted():
    """fedapp's core imports no server, algorithm or run-time module; the server layer no algorithm
    and no run-time module; the algorithms no run-time module; each but the registry, as ``UPWARD``
    says (importing ``fedapp.runtime.registry`` runs the package ``fedapp.runtime``, whose
    ``__init__`` is a docstring)."""
    assert imports("fedapp", ROOT / "fedapp" / "__init__.py", set(modules()), type_only=True) == set()
    upward = {(n, d) for n, deps in import_graph(type_only=True).items() for d in deps
              if layer(d) > layer(n) and d != "fedapp.runtime"}
    assert upward == UPWARD


def test_run_config_core_imports_no_algorithm_and_no_app():
    """fedapp.core.config, and all it imports (type-only and deferred imports included), reaches no
    strategy, client, registry or app: the registry adds the algorithms' keys from above."""
    graph, seen, todo = import_graph(type_only=True), set(), ["fedapp.core.config"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph[name]
    assert sorted(m for m in seen if m.split(".")[0] in ("strategies", "clients")
                  or m.startswith("fedapp.runtime")) == []


def test_clients_import_no_server_module():
    mods = modules()
    server = lambda d: d.split(".")[0] == "strategies" or d.startswith("fedapp.server")  # noqa: E731
    bad = {n: sorted(d for d in imports(n, p, set(mods)) if server(d)) for n, p in mods.items() if n.startswith("clients")}
    assert {n: d for n, d in bad.items() if d} == {}


def test_servers_import_only_declarations_from_clients():
    """A server module takes from clients/ only what both sides read: its algorithm's run-config
    declaration (the ``Settings`` type, its instances and shared ``Key``s, ``clients/keys.py``;
    Flower's strategies' in ``clients/flower.py``) or a client class; its maths and networks come
    from shared modules. The registry pairs strategies with clients, so a strategy module needs no
    client class."""
    from clients.base import FedClient
    from clients.keys import Settings
    from fedapp.core.config import Key

    offenders = []
    for name, path in modules().items():
        if not name.startswith("strategies"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clients"):
                module = __import__(node.module, fromlist=["_"])
                offenders += [f"{name}: {node.module}.{a.name}" for a in node.names
                              if not (node.module == "clients.flower" or getattr(module, a.name) is Settings
                                      or isinstance(getattr(module, a.name), (Settings, Key))
                                      or isinstance(getattr(module, a.name), type)
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


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    out = subprocess.run([sys.executable, "-c", f"{statement}\nimport sys\nprint(' '.join(sys.modules))"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_client_app_imports_no_server_module():
    """A ClientApp process (every simulated client, every site) imports no strategy and nothing of the
    server layer, also when it
    parses its run config and picks its client class (``side="client"``: the schema from the
    declarations in clients/): the client side of client-side dp is ``fedapp.core.dp_mod``. Flower's
    own ``import flwr`` loads ``flwr.serverapp``, so what is checked of it is that fedapp's ClientApp
    adds none of its modules."""
    client = loaded_after(
        "import fedapp.runtime.client_app as app\n"
        "cfg = app.parse_run_config({'strategy': 'fedsmoo', 'fedsmoo.rho': 0.05, 'flwr-fedyogi.eta': 0.5}, side='client')\n"
        "assert (cfg.algo('rho'), cfg.algo('beta'), cfg['flwr-fedyogi.eta']) == (0.05, 10.0, 0.5), cfg.as_dict()\n"
        "assert app.registry.client(cfg.strategy).__name__ == 'FedSMOOClient'")
    assert sorted(m for m in client if m.split(".")[0] == "strategies" or m.startswith("fedapp.server")) == []
    server = {m for m in client if m == "flwr.serverapp" or m.startswith("flwr.serverapp.")}
    assert server == {m for m in loaded_after("import flwr") if m == "flwr.serverapp" or m.startswith("flwr.serverapp.")}
