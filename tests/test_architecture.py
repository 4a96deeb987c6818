"""The direction of imports (ARCHITECTURE.md), checked on the source: a layer imports only the layers below it,
and each third-party library that is heavy or optional is imported by the one layer that owns it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nearDup"

# what each layer may import of nearDup; anything not listed is refused
ALLOWED = {
    "kernels": set(),
    "config": {"errors", "kernels"},  # raises ParameterError; threshold -> (b, r) is kernels.lsh maths
    "errors": set(),
    "wording": set(),
    "text": {"config", "errors", "kernels", "wording"},
    "store": {"config", "errors", "text", "wording"},  # the catalog plans which listed items to read
    "engine": {"config", "errors", "wording"},
    "pipeline": {"config", "errors", "kernels", "text", "store", "engine", "wording"},
    "report": {"config", "errors", "kernels", "text", "store", "pipeline", "wording"},
    "cli": {"config", "errors", "kernels", "text", "store", "engine", "pipeline", "report", "wording", "api"},
    "api": {"config", "errors", "kernels", "text", "store", "engine", "pipeline", "report", "wording"},
    "__main__": {"cli"},
}
# third-party libraries and the one layer allowed to import each (numpy and the stdlib are free for all)
OWNED = {"click": {"cli"}, "dask": {"engine"}, "distributed": {"engine"}, "tqdm": {"engine"},
         "rich": {"cli", "report"}, "mmh3": {"kernels"}, "lxml": {"text"}, "lxml_html_clean": {"text"},
         "pypdfium2": {"text"}, "trafilatura": {"text"}, "charset_normalizer": {"text"}, "zstandard": {"text"},
         "jinja2": {"report"}, "pygal": {"report"}, "pyarrow": {"text", "report"}}


def _layer(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path, package: Path = PACKAGE):
    """(nearDup layer or None, top-level module name) of every import in a file, type-checking ones included."""
    tree = ast.parse(path.read_text())
    here = list(path.relative_to(package).parent.parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[:len(here) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            if target:
                yield target[0], None
            else:  # from . import x (at the package's top): x is a layer or a name of nearDup/__init__
                for alias in node.names:
                    yield alias.name if (package / alias.name).exists() or (package / f"{alias.name}.py").exists() \
                        else "__init__", None
        elif isinstance(node, ast.ImportFrom):
            yield (None, node.module.split(".")[0]) if node.module else (None, "")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield None, alias.name.split(".")[0]


FILES = sorted(p for p in PACKAGE.rglob("*.py") if _layer(p) != "__init__")


def _wrong_layers(path: Path, package: Path = PACKAGE) -> list[str]:
    layer = _layer(path, package)
    assert layer in ALLOWED, f"{path}: a new layer {layer!r}: add it to ARCHITECTURE.md and to ALLOWED here"
    return sorted({target for target, _ in _imports(path, package)
                   if target is not None and target not in (layer, "__init__") and target not in ALLOWED[layer]})


def _wrong_libraries(path: Path, package: Path = PACKAGE) -> list[str]:
    layer = _layer(path, package)
    return sorted({name for _, name in _imports(path, package) if name in OWNED and layer not in OWNED[name]})


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers(path: Path):
    wrong, layer = _wrong_layers(path), _layer(path)
    assert not wrong, f"{path.relative_to(PACKAGE)} imports {wrong}; {layer} may import {sorted(ALLOWED[layer])}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_heavy_libraries_stay_in_their_layer(path: Path):
    wrong = _wrong_libraries(path)
    assert not wrong, f"{path.relative_to(PACKAGE)} imports {wrong}: only {[OWNED[n] for n in wrong]} may"


def test_the_checks_catch_wrong_imports(tmp_path):
    """The checks themselves, on a fake package: a kernel importing the store or click, a store module importing the
    pipeline (also as `from .. import pipeline`) are caught; a pipeline module importing the store is not."""
    package = tmp_path / "nearDup"
    for layer in ("kernels", "store", "pipeline"):
        (package / layer).mkdir(parents=True)
    (package / "store" / "__init__.py").write_text("")
    (package / "pipeline" / "__init__.py").write_text("")
    kernel = package / "kernels" / "k.py"
    kernel.write_text("import numpy as np\nfrom ..store import workdir\nimport click\n")
    store = package / "store" / "s.py"
    store.write_text("from .. import pipeline\nfrom ..config import X\n")
    stage = package / "pipeline" / "p.py"
    stage.write_text("from ..store.workdir import WorkDir\nfrom .driver import Runner\nimport numpy\n")
    assert _wrong_layers(kernel, package) == ["store"]
    assert _wrong_libraries(kernel, package) == ["click"]
    assert _wrong_layers(store, package) == ["pipeline"]
    assert _wrong_layers(stage, package) == [] and _wrong_libraries(stage, package) == []
