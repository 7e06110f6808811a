"""``notebooks/explore.ipynb`` runs headless (nbclient, ipykernel of this interpreter) and prints the truth."""

from __future__ import annotations

import ast
import base64
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import pytest
from arrowmt.converters._fairseq_folder import convert_fairseq

from arrowmt.format._vocab import Dictionary
from arrowmt.training._dataset import ArrowMTDataset, open_dataset

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")
kernelspec = pytest.importorskip("jupyter_client.kernelspec")
jupyter_manager = pytest.importorskip("jupyter_client.manager")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NOTEBOOK = NOTEBOOKS / "explore.ipynb"
FIXTURE = ROOT.parent / "shared" / "data" / "fairseq-multi30k-de-en" / "mmap"
REFERENCE_DE = "zwei junge weiße männer sind im freien in der nähe vieler büsche ."
LANGS = {"source": "de", "target": "en"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Executed(NamedTuple):
    """How the notebook was run (``env-corpus`` or ``default-fixture``) and the executed notebook."""

    mode: str
    nb: Any


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_explore", NOTEBOOKS / "make_explore.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pinned_kernel_manager(folder: Path) -> Any:
    """A ``python3`` kernel that runs under this very interpreter (this venv), whatever PATH says."""
    spec_dir = folder / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (arrowmt test)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    specs = kernelspec.KernelSpecManager(kernel_dirs=[str(folder / "kernels")])
    return jupyter_manager.KernelManager(kernel_name="python3", kernel_spec_manager=specs)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("notebook") / "corpus"
    convert_fairseq(FIXTURE, out, progress=False)
    return out


@pytest.fixture(scope="module", params=["env-corpus", "default-fixture"])
def executed(request: pytest.FixtureRequest, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Executed:
    """The notebook after a headless run: on the test's corpus, or converting the fixture itself."""
    env = {k: v for k, v in os.environ.items() if k != "ARROWMT_NOTEBOOK_DATA"}
    if request.param == "env-corpus":
        env["ARROWMT_NOTEBOOK_DATA"] = str(corpus)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    km = pinned_kernel_manager(tmp_path_factory.mktemp("kernel"))
    client = nbclient.NotebookClient(
        nb, km=km, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute(cleanup_kc=True, env=env)  # we own km: shut the kernel down and close its sockets
    return Executed(request.param, nb)


def stdout_of(nb: Any) -> str:
    return "".join(o["text"] for c in nb.cells for o in c.get("outputs", []) if o["output_type"] == "stream")


def pngs_of(nb: Any) -> list[bytes]:
    outputs = [o for c in nb.cells for o in c.get("outputs", []) if "data" in o]
    return [base64.b64decode(o["data"]["image/png"]) for o in outputs if "image/png" in o["data"]]


def decode_row(ds: ArrowMTDataset, dicts: dict[str, Dictionary], column: str, row: int) -> str:
    ids = ds.row(column, row).numpy()
    d = dicts[column]
    return d.decode(ids[(ids != d.eos) & (ids != d.pad)])


def test_committed_notebook_matches_generator() -> None:
    generated = nbformat.writes(load_generator().build_notebook()) + "\n"
    assert NOTEBOOK.read_text(encoding="utf-8") == generated, "run: python notebooks/make_explore.py"


def test_every_cell_ran_without_error(executed: Executed) -> None:
    code_cells = [c for c in executed.nb.cells if c["cell_type"] == "code"]
    assert all(c.get("outputs") for c in code_cells)
    assert not [o for c in code_cells for o in c["outputs"] if o["output_type"] == "error"]


def test_kernel_is_this_interpreter(executed: Executed) -> None:
    line = re.search(r"^python (.+)$", stdout_of(executed.nb), re.MULTILINE)
    assert line is not None
    assert Path(line.group(1)).resolve() == Path(sys.executable).resolve()
    assert "matplotlib backend agg" in stdout_of(executed.nb).lower()


def test_row_count_and_lengths_printed(executed: Executed, corpus: Path) -> None:
    out = stdout_of(executed.nb)
    ds = open_dataset(corpus, "train")
    assert f"\nrows {len(ds)}\n" in out
    opened = re.search(r"^corpus (.+)$", out, re.MULTILINE)
    assert opened is not None
    if executed.mode == "env-corpus":
        assert Path(opened.group(1)) == corpus
    else:
        assert Path(opened.group(1)).parent.name.startswith("arrowmt-notebook-")
    for column in LANGS:
        lengths = ds.lengths(column)
        assert f"length {column}: tokens {int(lengths.sum())} " in out
        assert f" max {int(lengths.max())}\n" in out


def test_plots_are_png_outputs(executed: Executed) -> None:
    images = pngs_of(executed.nb)
    assert len(images) == 3
    assert all(img.startswith(PNG_MAGIC) and len(img) > 1000 for img in images)
    for name in ("length_histograms", "length_scatter", "top_tokens"):
        assert f"figure {name} " in stdout_of(executed.nb)


def test_top_tokens_match_bincount(executed: Executed, corpus: Path) -> None:
    ds = open_dataset(corpus, "train")
    dictionary = Dictionary.load(corpus / "dict.en.txt")
    values = np.concatenate([ds.row("target", i).numpy() for i in range(len(ds))])
    counts = np.bincount(values, minlength=len(dictionary))
    best = int(np.argsort(-counts, kind="stable")[0])
    expected = f"   1 {best:6d} {dictionary.symbols[best]!r:>14} {counts[best]:7d} "
    assert expected in stdout_of(executed.nb)


def test_decoded_samples_match_open_dataset(executed: Executed, corpus: Path) -> None:
    out = stdout_of(executed.nb)
    ds = open_dataset(corpus, "train")
    dicts = {c: Dictionary.load(corpus / f"dict.{lang}.txt") for c, lang in LANGS.items()}
    match = re.search(r"^sample rows (\[.*\])$", out, re.MULTILINE)
    assert match is not None
    rows = ast.literal_eval(match.group(1))
    assert len(rows) == 5 and rows[0] == 0
    for row in rows:
        for column, lang in LANGS.items():
            assert f"[{row}] {column} ({lang}): {decode_row(ds, dicts, column, row)}\n" in out
    assert f"[0] source (de): {REFERENCE_DE}\n" in out
