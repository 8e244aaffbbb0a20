"""The product's code stays readable in pieces: no class over 300 lines, no function over 40, no
module over 500 (the product: fedapp/, strategies/, clients/; lines counted from ``def`` or ``class``
to the last line of the body, docstring and comments included)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("fedapp", "strategies", "clients")
MAX_CLASS, MAX_FUNCTION, MAX_MODULE = 300, 40, 500


def oversize(root: Path = ROOT) -> set[str]:
    """Every module, class and function of the product over its limit, as ``kind path[:name]``."""
    out = set()
    for pkg in PRODUCT:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            source = path.read_text()
            if len(source.splitlines()) > MAX_MODULE:
                out.add(f"module {rel}")
            for node in ast.walk(ast.parse(source)):
                size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
                if isinstance(node, ast.ClassDef) and size > MAX_CLASS:
                    out.add(f"class {rel}:{node.name}")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > MAX_FUNCTION:
                    out.add(f"function {rel}:{node.name}")
    return out


def test_no_product_class_function_or_module_over_its_limit():
    assert oversize() == set()


def test_limits_are_measured_as_said(tmp_path):
    """A 41-line function, a 301-line class and a 501-line module are caught; 40, 300 and 500 are not."""
    def function(name: str, lines: int) -> str:
        return f"def {name}():\n" + "    x = 0\n" * (lines - 1)

    pkg = tmp_path / "fedapp"
    pkg.mkdir()
    (pkg / "ok.py").write_text(function("f", 40) + "class C:\n" + "    y = 0\n" * 299 + "\n" * 160)
    (pkg / "big.py").write_text(function("g", 41) + "class D:\n" + "    y = 0\n" * 300 + "\n" * 159)
    assert len((pkg / "ok.py").read_text().splitlines()) == 500
    assert oversize(tmp_path) == {"function fedapp/big.py:g", "class fedapp/big.py:D", "module fedapp/big.py"}
