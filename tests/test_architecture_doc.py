"""docs/architecture.md stays short and true of the code: every module it lists exists, every hook
it names is one the code has, and every function its drawn rounds pass through is defined."""

import ast
import importlib
import re
from pathlib import Path

from clients.base import FedClient
from fedapp.server.discovery import Federation
from fedapp.server.exchange import Exchange
from fedapp.server.hooks import OwnHooks
from fedapp.server.rounds import Driver
from strategies.base import FedStrategy
from strategies.pefll import PeFLL

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
CLASSES = {c.__name__: c for c in (Driver, Exchange, Federation, FedClient, FedStrategy, PeFLL)}
#: quantities of PeFLL's algorithm that its drawn round names (they are maths, not code)
SYMBOLS = {"eta_v", "v_i", "theta_i", "delta_theta_i", "delta_v_i", "delta_eta_v_i"}


def sections() -> dict[str, str]:
    out, title = {}, ""
    for line in PAGE.read_text().splitlines(keepends=True):
        if line.startswith("## "):
            title = line[3:].strip()
        out[title] = out.get(title, "") + line
    return out


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```\n(.*?)```", text, flags=re.S)


def defined_names() -> set[str]:
    """Every function, class, attribute and module-level name the product defines."""
    names = set()
    for pkg in ("fedapp", "strategies", "clients"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
    return names


def test_page_is_under_250_lines():
    assert len(PAGE.read_text().splitlines()) < 250


def test_every_listed_module_exists():
    """The layout's files (``folder/`` then its ``name.py`` lines) and every path the page names."""
    [layout] = code_blocks(sections()[""])
    missing, folder = [], ROOT
    for line in layout.splitlines():
        first, here = line.split()[0], folder
        if not line.startswith(" "):  # a folder of the layout, or a file at the top
            folder = here = ROOT / first if first.endswith("/") else ROOT
            missing += [] if (ROOT / first).exists() else [first]
            line = line[len(first):]
        elif first.endswith("/"):  # a subfolder: its files named on its line
            here = folder / first
        for name in re.findall(r"\b([a-z_]+\.py)\b", line):
            if name != "X.py" and not (here / name).exists():
                missing.append(f"{here.relative_to(ROOT)}/{name}")
    paths = re.findall(r"`((?:fedapp|strategies|clients|tests|docs|simulations|scripts)/[\w/.]+\.(?:py|md))`",
                       PAGE.read_text())
    missing += [p for p in paths if not (ROOT / p).exists() and "/X.py" not in p]
    assert missing == []


def test_every_named_hook_exists():
    """Each hook in the server and client hook lists (``- `name(...)```) is one the code has:
    FedStrategy's, OwnHooks', or FedClient's."""
    server, client = sections()["Server hooks (`strategies/base.py`, FedAvg defaults; `fedapp/server/hooks.py` "
                                "`OwnHooks`)"], sections()["Client hooks (`clients/base.py`)"]
    server_hooks = re.findall(r"^- `(\w+)", server, flags=re.M) + re.findall(r"`(\w+)\(", server)
    client_hooks = re.findall(r"^- `(\w+)", client, flags=re.M) + re.findall(r"`(\w+)\(", client)
    assert len(server_hooks) > 15 and len(client_hooks) > 8
    names = defined_names()
    assert [h for h in server_hooks if not (hasattr(FedStrategy, h) or h in OwnHooks.__dict__ or h in names)] == []
    assert [h for h in client_hooks if not (hasattr(FedClient, h) or h in names)] == []
    # the phase-ordered lists name FedStrategy's and OwnHooks' own methods, not just any name
    listed = re.findall(r"^- `(\w+)\(", server, flags=re.M)
    assert [h for h in listed if not (hasattr(FedStrategy, h) or h in OwnHooks.__dict__)] == []


def test_drawn_rounds_name_only_functions_that_exist():
    """In the drawings of one round of FedAvg and of PeFLL, every ``Class.method`` is that class's
    and every other name a reader passes (snake_case, or followed by an argument list) is defined."""
    text = "".join(code_blocks(sections()["One round of FedAvg"]) + code_blocks(sections()["One round of PeFLL"]))
    wrong = [f"{c}.{m}" for c, m in re.findall(r"\b([A-Z]\w+)\.(\w+)", text) if c in CLASSES
             and not hasattr(CLASSES[c], m)]
    names = defined_names()
    called = set(re.findall(r"\b([a-z_]\w*)\(", text)) | set(re.findall(r"\b([a-z]+_[a-z_]+)\b", text))
    wrong += sorted(n for n in called - SYMBOLS if n not in names)
    assert wrong == []
    assert len(called) > 20  # the check has something to check


def test_dotted_names_resolve():
    """``module.name`` references (``loop.run``, ``screens.screen``, ``strategies.privacy.private_round``)
    name what the module has."""
    wrong = []
    for ref in set(re.findall(r"`((?:[a-z_]+\.)+[a-z_]+)`", PAGE.read_text())):
        parts = ref.split(".")
        if parts[-1] in ("json", "csv", "png", "pt", "toml", "md", "py", "npz"):
            continue
        for base in ("fedapp.server.", "fedapp.core.", "fedapp.runtime.", ""):
            try:
                obj = importlib.import_module(base + parts[0])
            except ImportError:
                continue
            for i, part in enumerate(parts[1:], 1):
                if hasattr(obj, part):
                    obj = getattr(obj, part)
                else:
                    try:
                        obj = importlib.import_module(base + ".".join(parts[:i + 1]))
                    except ImportError:
                        wrong.append(ref)
                        break
            break
    assert wrong == []
