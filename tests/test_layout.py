"""The package's house: imports flow one way, root <- common, data <- inference <- training <- learning, with no
cycle (the repository's tools, which import the package, included); the package never imports the tools; what travels
with a saved model imports only torch, transformers and its neighbours."""

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "modeling"
TOOLS = REPO_ROOT / "tools"  # the repository's own (benchmarks, figures, the walk's page): not in the wheel
ROOTS = ("modeling", "tools")
# What each part may import of the package, besides itself. The root holds what travels with a model.
ALLOWED = {
    "root": {"root"},
    "common": set(),
    "data": {"root", "common"},
    "inference": {"root", "common", "data"},
    "training": {"root", "common", "data", "inference"},
    "learning": {"root", "common", "data", "inference", "training"},
}
# The model's files that go to the Hub (custom code): only torch, transformers, huggingface_hub, the standard library
TRAVELLING_THIRD_PARTY = {"torch", "transformers", "huggingface_hub", "tokenizers", "safetensors"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(path: Path) -> set[str]:
    """The modules of the package and of the tools that `path` imports (at its top level or inside functions)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] in ROOTS:
                submodules = {f"{target}.{alias.name}" for alias in node.names
                              if (REPO_ROOT / f"{target}.{alias.name}".replace(".", "/")).with_suffix(".py").exists()}
                found |= submodules or {target}  # `from . import measure` imports the module, not the package
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] in ROOTS}
    return {module for module in found if module != name}


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else "root"


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py") if "metrics" not in path.parts}
TOOL_MODULES = {module_name(path): path for path in TOOLS.rglob("*.py")}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_imports_only_what_its_part_may(module):
    own = part(module)
    for imported in package_imports(MODULES[module]):
        assert not imported.startswith("tools"), f"{module} imports {imported}: the package never imports the tools"
        if imported == "modeling":
            assert own != "root" or module.endswith("__init__"), f"{module} imports the package root"
            continue
        other = part(imported)
        assert other == own or other in ALLOWED[own], f"{module} ({own}) imports {imported} ({other})"


def test_there_is_no_import_cycle():
    every = MODULES | TOOL_MODULES
    graph = {module: {imported for imported in package_imports(path) if imported in every}
             for module, path in every.items()}
    visiting, done = [], set()

    def visit(module):
        if module in done:
            return
        assert module not in visiting, "import cycle: " + " -> ".join([*visiting[visiting.index(module):], module])
        visiting.append(module)
        for imported in graph[module]:
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in graph:
        visit(module)


def travelling_files() -> set[Path]:
    """What a saved model folder carries as code: the model, configuration and pipeline files and every module they
    import, as transformers copies them (relative imports, followed)."""
    todo = [PACKAGE / name for name in ("modeling_annotated_transformer.py", "configuration_annotated_transformer.py",
                                        "pipeline_annotated_transformer.py")]
    found = set()
    while todo:
        path = todo.pop()
        if path not in found:
            found.add(path)
            todo += [MODULES[module] for module in package_imports(path) if module in MODULES]
    return found


def test_what_travels_with_a_model_imports_only_torch_transformers_and_its_neighbours():
    travelling = travelling_files()
    assert {path.parent for path in travelling} == {PACKAGE}  # neighbours only: a saved folder is flat
    assert {"loss.py", "input_checks.py", "generation.py", "saving.py"} <= {path.name for path in travelling}
    for path in travelling:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                assert top in TRAVELLING_THIRD_PARTY or top in __import__("sys").stdlib_module_names, (
                    f"{path.name} imports {name}, which a folder loaded with trust_remote_code may not have")
