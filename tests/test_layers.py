"""The package's layers: each module imports only its own layer and those below; the core runs without torch."""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import arrowmt
import arrowmt._lazy as lazy_faces  # the module under test here
from tests.conftest import MULTI30K, ROOT, fairseq_fixture
from tests.lm_data import mono_corpus

# Lower number = lower layer. The top (CLI, info, demo) may import everything.
LAYERS = {
    "arrowmt._arrays": 0,
    "arrowmt._checks": 0,
    "arrowmt._errors": 0,
    "arrowmt._heap": 0,
    "arrowmt._lazy": 0,
    "arrowmt._optional": 0,
    "arrowmt._version": 0,
    "arrowmt.storage": 1,
    "arrowmt.io": 2,
    "arrowmt.files": 3,
    "arrowmt.format": 4,
    "arrowmt.reading": 5,
    "arrowmt.splits": 6,
    "arrowmt.writing": 7,
    "arrowmt.views": 8,
    "arrowmt.segments": 7,
    "arrowmt.converters": 9,
    "arrowmt.bucketing": 10,
    "arrowmt.plans": 11,
    "arrowmt.blocks": 12,
    "arrowmt.mixing": 12,
    "arrowmt.copies": 13,
    "arrowmt.stored": 6,  # reading a copy: below the split that takes its row translator from it
    "arrowmt.training": 14,
    "arrowmt.packing": 15,
    "arrowmt.integrations": 16,
}
TOP = 17


def discovered_faces() -> list[str]:
    """Every package of the library ("arrowmt" first), found on disk: a new one cannot escape the faces' tests; the
    integrations (modules of their own, each importing its peer library) and the bundled data have no face."""
    found = sorted(".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "arrowmt").rglob("__init__.py"))
    return [name for name in found if not name.startswith(("arrowmt.integrations", "arrowmt.sample_data"))]


FACES = discovered_faces()
TEST_SUPPORT = "arrowmt.testing"  # the tests' and benchmarks' table of private names
TORCH_FREE = (
    "arrowmt.storage",
    "arrowmt.io",
    "arrowmt.files",
    "arrowmt.format",
    "arrowmt.reading",
    "arrowmt.splits",
    "arrowmt.writing",
    "arrowmt.views",
    "arrowmt.converters",
    "arrowmt.bucketing",
    "arrowmt.plans",
    "arrowmt.blocks",
    "arrowmt.mixing",
    "arrowmt.copies",
    "arrowmt._info",
    "arrowmt._cli",
    "arrowmt.integrations.hf",
)
SOURCE_DIRS = {"arrowmt": ROOT / "arrowmt"}


def layer_of(module: str) -> int:
    matches = [name for name in LAYERS if module == name or module.startswith(name + ".")]
    return LAYERS[max(matches, key=len)] if matches else TOP


def modules() -> dict[str, Path]:
    """Every module of the package by its installed name."""
    found: dict[str, Path] = {}
    for package, folder in SOURCE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if package == "arrowmt" and parts and parts[0] == "sample_data":
                continue
            name = ".".join((package, *parts)).removesuffix(".__init__")
            found[name] = path
    return found


def imported(path: Path, module: str) -> list[str]:
    """Absolute names of every module ``path`` imports, at any depth (lazy imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level if path.name != "__init__.py" else None]
                names.append(".".join([*base, node.module or ""]).rstrip("."))
            else:
                names.append(node.module or "")
    return names


def test_no_module_imports_a_higher_layer() -> None:
    found = modules()
    assert "arrowmt.reading._reader" in found and "arrowmt.converters._output" in found
    violations = []
    for module, path in found.items():
        if module == "arrowmt":  # the public API re-exports every layer lazily
            continue
        for name in imported(path, module):
            if name.startswith("arrowmt") and layer_of(name) > layer_of(module):
                violations.append(f"{module} imports {name}")
    assert violations == []


def test_torch_free_layers_never_import_torch() -> None:
    bad = [
        f"{module} imports {name}"
        for module, path in modules().items()
        if module.startswith(TORCH_FREE)
        for name in imported(path, module)
        if name == "torch" or name.startswith("torch.")
    ]
    assert bad == []


def test_plans_import_only_the_core_and_the_format() -> None:
    """The plan layers sit between the corpus layers and training: no torch, no training, no conversion, no views,
    no integration."""
    planning = ("arrowmt.bucketing", "arrowmt.plans", "arrowmt.blocks", "arrowmt.mixing")
    allowed = ("arrowmt._", "arrowmt.storage", "arrowmt.io", "arrowmt.files", "arrowmt.format", "arrowmt.reading",
               "arrowmt.splits", "arrowmt.stored", *planning)  # fmt: skip
    bad = [
        f"{module} imports {name}"
        for module, path in modules().items()
        if module.startswith(planning)
        for name in imported(path, module)
        if name.startswith("arrowmt") and not name.startswith(allowed)
    ]
    assert "arrowmt.plans._plan" in modules()
    assert bad == []


def private_package(name: str) -> str | None:
    """The package whose private module ``name`` is (``arrowmt.plans`` for ``arrowmt.plans._plan``), else None."""
    parts = name.split(".")
    private = [i for i, part in enumerate(parts) if part.startswith("_")]
    return ".".join(parts[: private[0]]) if private else None


def test_no_module_imports_another_packages_private_module() -> None:
    """Other packages import a package's public face (its ``__init__``); the core (``arrowmt._errors``, ...) is
    everyone's. ``arrowmt.testing``, the tests' and benchmarks' one table of private names, is the exception."""
    violations = []
    for module, path in modules().items():
        if module == TEST_SUPPORT:
            continue
        own = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for name in imported(path, module):
            package = private_package(name)
            if package is None or package in (own, "arrowmt"):
                continue
            if package.startswith("arrowmt"):
                violations.append(f"{module} imports {name}")
    assert violations == []


def test_the_test_support_table_holds_only_private_names() -> None:
    """What ``arrowmt`` exports, tests take from ``arrowmt`` (the public API); ``arrowmt.testing`` is the rest."""
    public = set(importlib.import_module("arrowmt").__all__)
    _, table = lazy_faces.face_imports(modules()[TEST_SUPPORT])
    assert sorted(name for names in table.values() for name in names if name in public) == []


def test_tests_and_benchmarks_reach_private_names_through_the_test_support_module() -> None:
    """``from arrowmt.<package>._<module> import ...`` appears nowhere under tests/ or benchmarks/: private names
    come from ``arrowmt.testing``'s table (a private module itself may still be imported, to monkeypatch it)."""
    found = []
    for folder in ("tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and private_package(node.module or ""):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports from {node.module}")
    assert found == []


@pytest.mark.parametrize("name", FACES[1:])
def test_faces_export_what_they_import(name: str) -> None:
    face = importlib.import_module(name)
    assert face.__all__ and all(hasattr(face, export) for export in face.__all__)


@pytest.mark.parametrize("name", FACES)
def test_faces_name_each_export_once(name: str) -> None:
    """A face's imports are its one table of exports (``arrowmt._lazy.attach`` reads them back): ``__all__`` and
    ``dir`` are exactly those names, each once, and each resolves to what its module defines."""
    face = importlib.import_module(name)
    eager, lazy = lazy_faces.face_imports(modules()[name])
    listed = eager + [export for names in lazy.values() for export in names]
    assert len(listed) == len(set(listed)) and face.__all__ == sorted(listed) == dir(face)
    for module, names in lazy.items():
        assert all(getattr(face, export) is getattr(importlib.import_module(module), export) for export in names)
    assert all(export in vars(face) for export in eager)
    text = modules()[name].read_text(encoding="utf-8")
    assert "__all__ = [" not in text and "_EXPORTS" not in text


def test_the_folder_tree_is_the_layer_order() -> None:
    """A package inside another sits at its layer or above: importing it runs its parents' faces first, so a lower
    one inside would load a higher layer under every reader (``arrowmt.stored``, layer 6, was inside the layer-13
    ``arrowmt.copies`` until 2026-12-07)."""
    nested = [(name, name.rsplit(".", 1)[0]) for name in FACES if name.count(".") > 1]
    assert [(child, parent) for child, parent in nested if LAYERS[child] < LAYERS[parent]] == []


MAX_FACE_NAMES = 30  # a package's face; arrowmt itself, the public API, is the user's table of contents


def test_every_package_has_a_face_and_a_layer() -> None:
    assert FACES[0] == "arrowmt" and len(FACES) > 15
    assert [name for name in FACES[1:] if name not in LAYERS] == []


def test_no_package_face_exports_more_than_thirty_names() -> None:
    sizes = {name: len(importlib.import_module(name).__all__) for name in FACES[1:]}
    assert {name: size for name, size in sizes.items() if size > MAX_FACE_NAMES} == {}


def test_lazy_faces_load_only_what_is_used() -> None:
    """Importing the faces loads none of their modules; a reading process that takes the reader from the reading
    face and the manifest and the schema from the format face never loads the writer, verification or the
    vocabulary's ``pyarrow.compute``."""
    lazy = [f for f in FACES[1:] if not lazy_faces.face_imports(modules()[f])[0]]  # faces that load nothing eagerly
    assert {"arrowmt.format", "arrowmt.reading", "arrowmt.converters"} <= set(lazy)
    code = (
        "import sys\n"
        f"import {', '.join(lazy)}\n"
        f"loaded = [m for m in sys.modules if m.startswith(tuple(f + '.' for f in {lazy!r})) and m not in {lazy!r}]\n"
        "assert loaded == [], loaded\n"
        "from arrowmt.format import TOKENS, Manifest\n"
        "from arrowmt.reading import SplitFile\n"
        "assert 'pyarrow.compute' not in sys.modules, 'pyarrow.compute was imported'\n"
        "assert 'arrowmt.writing._writer' not in sys.modules and 'arrowmt.views._verify' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def converted_fixture(tmp_path: Path) -> Path:
    """The fairseq fixture's mmap data-bin converted into ``tmp_path / "corpus"``."""
    from arrowmt import convert_fairseq

    out = tmp_path / "corpus"
    convert_fairseq(fairseq_fixture() / "mmap", out, progress=False)
    return out


def test_training_on_a_corpus_never_loads_pyarrow_compute(tmp_path: Path) -> None:
    """Opening a corpus (its dictionaries checked against the split), batching it with the training face's
    classes and reading batches (pairs, LM blocks of its target side, a mixture) never imports the vocabulary's
    ``pyarrow.compute`` (about 2 MiB of private memory a rank, with what it imports) nor ``numpy.ma`` (about 1 MiB,
    imported by ``np.unique``'s first call); loading a dictionary does import ``pyarrow.compute``."""
    out = converted_fixture(tmp_path)
    arrowmt.convert_text(str(MULTI30K / "val"), tmp_path / "lm", lang="en", progress=False)  # LM blocks
    code = (
        "import sys\n"
        "import arrowmt\n"
        "from arrowmt.training import FairseqBlockCollater, FairseqCollater, TokenBatchSampler\n"
        "ds = arrowmt.open_dataset(sys.argv[1], 'train')\n"
        "collate = FairseqCollater(ds.special_ids)\n"
        "batches = [collate(ds.__getitems__(list(b))) for b in TokenBatchSampler(ds, max_tokens=64, seed=1)]\n"
        "assert len(batches) > 1, len(batches)\n"
        "lm = arrowmt.open_blocks(sys.argv[2], 'train', tokens_per_sample=64, break_mode='none')\n"
        "blocks = FairseqBlockCollater(lm.special_ids)\n"
        "batches = [blocks(lm.__getitems__(list(b))) for b in arrowmt.BlockBatchSampler(lm, max_tokens=512)]\n"
        "mix = arrowmt.open_mixture({'a': ds, 'b': arrowmt.open_dataset(sys.argv[1], 'train')})\n"
        "sampler = arrowmt.MixtureBatchSampler(mix, max_tokens=64, temperature=2.0)\n"
        "batches = [collate(mix.__getitems__(list(b))) for b in sampler]\n"
        "assert 'pyarrow.compute' not in sys.modules, 'pyarrow.compute was imported'\n"
        "assert 'numpy.ma' not in sys.modules, 'numpy.ma was imported'\n"
        "ds.dictionary(ds.columns[0])\n"
        "assert 'pyarrow.compute' in sys.modules\n"
    )
    args = [sys.executable, "-c", code, str(out), str(tmp_path / "lm")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


COPY_MODULES = (
    "arrowmt.stored._row_order",
    "arrowmt.stored._block_order",
    "arrowmt.stored._stored_plan",
)


def test_reading_a_corpus_as_converted_never_loads_the_copies_code(tmp_path: Path) -> None:
    """Pairs, a mixture and LM blocks of corpora as converted are read without the code of copies in plan order (row
    and block orders, the stored plan: Python objects in every rank's private memory); a copy loads it."""
    out = converted_fixture(tmp_path)
    arrowmt.order_copy(out, tmp_path / "ordered", max_tokens=64, seed=1, progress=False)
    code = (
        "import sys\n"
        "import arrowmt\n"
        "ds = arrowmt.open_dataset(sys.argv[1], 'train')\n"
        "collate = arrowmt.FairseqCollater(ds.special_ids)\n"
        "batches = [collate(ds.__getitems__(list(b))) for b in arrowmt.TokenBatchSampler(ds, max_tokens=64, seed=1)]\n"
        "mix = arrowmt.open_mixture({'a': ds, 'b': arrowmt.open_dataset(sys.argv[1], 'train')})\n"
        "batches += [collate(mix.__getitems__(list(b))) for b in arrowmt.MixtureBatchSampler(mix, max_tokens=64)]\n"
        "assert len(batches) > 2, len(batches)\n"
        "lm = arrowmt.open_blocks(sys.argv[3], 'train', 8, 'none')\n"
        "lm_collate = arrowmt.FairseqBlockCollater(lm.special_ids)\n"
        "blocks = [lm_collate(lm.__getitems__(list(b))) for b in arrowmt.BlockBatchSampler(lm, max_tokens=32)]\n"
        "assert len(blocks) > 2, len(blocks)\n"
        f"loaded = [m for m in {COPY_MODULES!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "copy = arrowmt.open_dataset(sys.argv[2], 'train')\n"
        "next(iter(arrowmt.TokenBatchSampler(copy, max_tokens=64, seed=1)))\n"
        f"assert all(m in sys.modules for m in {COPY_MODULES[::2]!r})\n"
    )
    lm = mono_corpus(tmp_path / "lm", [[5, 6, 7, 2], [8, 9, 2]] * 20)
    args = [sys.executable, "-c", code, str(out), str(tmp_path / "ordered"), str(lm)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_importing_every_plan_module_does_not_load_torch() -> None:
    names = sorted(module for module in modules() if module.startswith("arrowmt.plans"))
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n    importlib.import_module(name)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert not [m for m in sys.modules if m.startswith('arrowmt.training')], 'training was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", ["info", "verify"])
def test_cli_info_and_verify_do_not_load_torch(tmp_path: Path, command: str) -> None:
    out = converted_fixture(tmp_path)
    code = (
        "import sys, runpy; sys.argv = ['arrowmt', sys.argv[1], sys.argv[2]]\n"
        "try:\n    runpy.run_module('arrowmt', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code, command, str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "train" in done.stdout or "OK" in done.stdout


def test_python_dash_m_arrowmt_has_version() -> None:
    import arrowmt

    done = subprocess.run([sys.executable, "-m", "arrowmt", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"arrowmt {arrowmt.__version__}"


def test_wheel_has_only_the_arrowmt_top_level_name(tmp_path: Path) -> None:
    """The built wheel installs one import name, ``arrowmt``, and every module of it (a package missing from the
    wheel imports in a checkout and fails once installed: arrowmt.io was)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "arrowmt", src / "arrowmt", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src)]
    done = subprocess.run([*command, "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("arrowmt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"arrowmt"}
    assert {str(path.relative_to(ROOT)) for path in modules().values()} <= set(names)
    assert "arrowmt/sample_data/multi30k/train.de.gz" in names
    assert "BuildBackendWarning" not in done.stderr


def test_storage_imports_only_the_core() -> None:
    """The storage layer knows files as bytes and blocks: nothing of the format or anything above it."""
    bad = [
        f"{module} imports {name}"
        for module, path in modules().items()
        if module.startswith("arrowmt.storage")
        for name in imported(path, module)
        if name.startswith("arrowmt") and not name.startswith(("arrowmt._", "arrowmt.storage"))
    ]
    assert "arrowmt.storage._store" in modules()
    assert bad == []
