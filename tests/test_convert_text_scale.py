"""Text conversion at corpus scale: chunks, workers, shards, a Dask cluster, bounded memory, failures, provenance."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from arrowmt import Dictionary, InputDataError, InvalidParameterError, Manifest, convert_with_options, open_dataset
from arrowmt.testing import UNKNOWN_WARNING_RATE, parse_byte_size, unknown_lines
from tests.conftest import MULTI30K, ROOT, fairseq_fixture, gz_lines, import_fairseq, text_options

DATA_FILES = ("train.arrow", "test.arrow", "dict.de.txt", "dict.en.txt", "arrowmt.json")
INDEXES = ("train.arrow.blocks", "test.arrow.blocks")  # block indexes, for object storage


def _plain(folder: Path, name: str, lines: dict[str, list[str]] | None = None) -> str:
    """Plain-text copies of Multi30k ``name`` (or of ``lines``) in ``folder``; returns the prefix."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        text = lines[lang] if lines else gz_lines(MULTI30K / f"{name}.{lang}.gz")
        (folder / f"{name}.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
    return str(folder / name)


def _same_files(a: Path, b: Path, names: tuple[str, ...] = DATA_FILES) -> None:
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One worker, one chunk per file."""
    out = tmp_path_factory.mktemp("reference") / "out"
    convert_with_options(text_options(), out, progress=False)
    return out


@pytest.mark.parametrize(
    ("workers", "chunk_bytes", "plain"),
    [(1, 2500, False), (2, 3000, False), (1, 777, True), (3, 1 << 16, True)],
)
def test_byte_identical_whatever_workers_chunks_and_compression(
    tmp_path: Path, reference: Path, workers: int, chunk_bytes: int, plain: bool
) -> None:
    prefixes = None
    if plain:
        prefixes = {"train": _plain(tmp_path / "text", "val"), "test": _plain(tmp_path / "text", "test")}
    opts = text_options(workers=workers, chunk_bytes=chunk_bytes, **({"prefixes": prefixes} if prefixes else {}))
    manifest = convert_with_options(opts, tmp_path / "out", progress=False)
    _same_files(reference, tmp_path / "out", DATA_FILES[:-1])
    assert manifest.files == Manifest.load(reference).files
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(DATA_FILES + INDEXES)  # no spill files left


def test_one_line_per_chunk(tmp_path: Path) -> None:
    lines = {lang: [*gz_lines(MULTI30K / f"val.{lang}.gz")[:120], "", "  x  "] for lang in ("de", "en")}
    prefix = _plain(tmp_path / "text", "small", lines)
    convert_with_options(text_options(prefixes={"train": prefix}), tmp_path / "one", progress=False)
    convert_with_options(
        text_options(prefixes={"train": prefix}, chunk_bytes=1, workers=2), tmp_path / "each", progress=False
    )
    _same_files(tmp_path / "one", tmp_path / "each", ("train.arrow", "dict.de.txt", "dict.en.txt", "arrowmt.json"))


def test_shards_of_chosen_rows_join_to_the_split(tmp_path: Path, reference: Path) -> None:
    manifest = convert_with_options(text_options(shard_rows=300), tmp_path / "out", progress=False)
    assert manifest.shards("train") == ["train", "train1", "train2", "train3"]
    assert [manifest.files[n].rows for n in manifest.shards("train")] == [300, 300, 300, 114]
    assert manifest.shards("test") == ["test", "test1", "test2", "test3"]
    whole, sharded = open_dataset(reference, "train"), open_dataset(tmp_path / "out", "train")
    assert len(sharded) == len(whole) == 1014
    for column in ("source", "target"):
        np.testing.assert_array_equal(sharded.lengths(column), whole.lengths(column))
        for i in (0, 299, 300, 301, 899, 900, 1013):
            np.testing.assert_array_equal(sharded.row(column, i).numpy(), whole.row(column, i).numpy())
    assert manifest.provenance["options"]["shard_rows"] == 300  # type: ignore[index]
    again = convert_with_options(
        text_options(shard_rows=300, workers=2, chunk_bytes=4000), tmp_path / "two", progress=False
    )
    _same_files(tmp_path / "out", tmp_path / "two", ("train3.arrow", "test2.arrow", "arrowmt.json"))
    assert again.files == manifest.files


def test_shards_run_across_comma_prefixes(tmp_path: Path) -> None:
    prefixes = {"train": f"{MULTI30K / 'val'},{MULTI30K / 'test'}"}
    manifest = convert_with_options(text_options(prefixes=prefixes, shard_rows=1500), tmp_path / "out", progress=False)
    assert [manifest.files[n].rows for n in manifest.shards("train")] == [1500, 514]
    ds = open_dataset(tmp_path / "out", "train")
    de = Dictionary.load(tmp_path / "out" / "dict.de.txt")
    line = gz_lines(MULTI30K / "test.de.gz")[485]  # row 1014 + 485 = 1499, the last of the first shard
    np.testing.assert_array_equal(ds.row("source", 1499).numpy(), [de.index(w) for w in line.split()] + [de.eos])


def test_dask_local_cluster_equals_local_conversion(tmp_path: Path, reference: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        workers = {w["id"] for w in client.scheduler_info()["workers"].values()}
        opts = text_options(executor=client.get_executor(), chunk_bytes=20_000)
        manifest = convert_with_options(opts, tmp_path / "out", progress=False)
        cli = [sys.executable, "-m", "arrowmt._cli", "convert", "text", str(tmp_path / "cli"), "--quiet"]
        cli += ["--src-lang", "de", "--tgt-lang", "en", "--trainpref", str(MULTI30K / "val")]
        cli += ["--testpref", str(MULTI30K / "test"), "--chunk-size", "16K"]
        done = subprocess.run([*cli, "--dask-scheduler", cluster.scheduler_address], capture_output=True, text=True)
    assert len(workers) == 2
    _same_files(reference, tmp_path / "out")
    assert manifest == Manifest.load(reference)
    assert done.returncode == 0, done.stderr
    _same_files(reference, tmp_path / "cli")


def test_worker_error_names_file_and_line_in_a_later_chunk(tmp_path: Path) -> None:
    lines = {lang: gz_lines(MULTI30K / f"val.{lang}.gz") for lang in ("de", "en")}
    lines["de"][699] = "kaputt \udcff"  # an invalid byte (0xff) on line 700
    folder = tmp_path / "text"
    folder.mkdir()
    for lang in ("de", "en"):
        (folder / f"val.{lang}").write_bytes(("\n".join(lines[lang]) + "\n").encode("utf-8", "surrogateescape"))
    prefixes = {"train": str(folder / "val")}
    with pytest.raises(InputDataError, match=r"val\.de:700: expected UTF-8 text, got invalid byte 0xff") as info:
        convert_with_options(text_options(prefixes=prefixes, workers=2, chunk_bytes=3000), tmp_path / "out")
    offset = len(("\n".join(lines["de"][:699]) + "\n").encode()) + len("kaputt ")
    assert f"at byte offset {offset} (byte 8 of line 700)" in str(info.value)
    assert not (tmp_path / "out").exists()  # no partial output


def test_failure_keeps_the_previous_dataset(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    bad = tmp_path / "bad"
    _plain(bad, "val", {"de": ["eins", "zwei"], "en": ["one"]})
    with pytest.raises(InputDataError, match="expected the same number of lines"):
        convert_with_options(text_options(prefixes={"train": str(bad / "val")}), out, overwrite=True, progress=False)
    _same_files(reference, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(DATA_FILES + INDEXES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "out"]  # no staging or spill files beside it


def test_unknown_tokens_match_fairseq_replaced(tmp_path: Path) -> None:
    import_fairseq()
    from fairseq.data import Dictionary as FairseqDictionary

    dict_de = fairseq_fixture() / "mmap" / "dict.de.txt"
    opts = text_options(srcdict=str(dict_de), tgtdict=str(fairseq_fixture() / "mmap" / "dict.en.txt"), chunk_bytes=5000)
    manifest = convert_with_options(opts, tmp_path / "out", progress=False)
    theirs = FairseqDictionary.load(str(dict_de))
    replaced, tokens = 0, 0
    for line in gz_lines(MULTI30K / "val.de.gz"):
        found: list[bool] = []
        ids = theirs.encode_line(line, add_if_not_exist=False, consumer=lambda _, i, found=found: found.append(i == 3))
        replaced, tokens = replaced + sum(found), tokens + len(ids)
    stats = manifest.provenance["unknown_tokens"]["train"]["source"]  # type: ignore[index]
    assert (stats["tokens"], stats["unknown"], stats["lang"]) == (tokens, replaced, "de")
    assert stats["percent"] == round(100 * replaced / tokens, 3) and 5 < stats["percent"] < 100


def test_unknown_report_warns_above_threshold() -> None:
    manifest = Manifest({"source": "de", "target": "en"}, {}, "text")
    high = {"lang": "de", "tokens": 1000, "unknown": 856, "percent": 85.6}
    low = {"lang": "en", "tokens": 1000, "unknown": int(1000 * UNKNOWN_WARNING_RATE), "percent": 5.0}
    manifest.provenance["unknown_tokens"] = {"train": {"source": high, "target": low}}
    report, warned = unknown_lines(manifest)
    assert report == [
        "[de] train source: 1000 tokens, 85.60% replaced by <unk>",
        "[en] train target: 1000 tokens, 5.00% replaced by <unk>",
    ]
    assert len(warned) == 1 and warned[0].startswith("85.6% of the source (de) tokens of train became <unk>")
    assert "check that the source dictionary (--srcdict or the train text) and the tokenization" in warned[0]
    manifest.provenance["unknown_tokens"] = {"train": {"source": low, "target": high}}
    assert "the target dictionary (--tgtdict or the train text)" in unknown_lines(manifest)[1][0]
    manifest.provenance["options"] = {"joined_dictionary": True}
    assert "check that the joined dictionary and the tokenization" in unknown_lines(manifest)[1][0]


def test_cli_reports_unknowns_and_warns_loudly(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "arrowmt._cli", "convert", "text", str(tmp_path / "out"), "--quiet"]
    args += ["--src-lang", "de", "--tgt-lang", "en", "--trainpref", str(MULTI30K / "val")]
    args += ["--srcdict", str(fairseq_fixture() / "mmap" / "dict.en.txt")]  # the English dictionary for German text
    done = subprocess.run(
        [*args, "--chunk-size", "8K", "--shard-rows", "500", "--workers", "2"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "[de] train source:" in done.stdout and "wrote 3 split file(s), 1014 rows" in done.stdout
    assert "arrowmt: WARNING:" in done.stderr and "of the source (de) tokens of train became <unk>" in done.stderr
    assert "[en] train target: " in done.stdout and "target (en)" not in done.stderr  # built from this text: 0%
    bad = subprocess.run([*args, "--overwrite", "--chunk-size", "lots"], capture_output=True, text=True)
    assert bad.returncode == 2 and "arrowmt: error: --chunk-size: expected a positive size" in bad.stderr


def test_parse_byte_size_and_bad_options() -> None:
    assert [parse_byte_size(s) for s in ("65536", "512K", "32M", "1G", "2mb")] == [
        65536,
        1 << 19,
        1 << 25,
        1 << 30,
        1 << 21,
    ]
    for text in ("", "0", "-5", "3.5M", "12T"):
        with pytest.raises(InvalidParameterError, match="chunk_bytes: expected a positive size"):
            parse_byte_size(text)
    for kw, name in (
        ({"chunk_bytes": 0}, "chunk_bytes"),
        ({"workers": 0}, "workers"),
        ({"shard_rows": 0}, "shard_rows"),
    ):
        with pytest.raises(InvalidParameterError, match=name):
            text_options(**kw)


MEMORY_PROBE = """
import json, resource, sys
from arrowmt.converters._parallel_text import convert_text
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
convert_text(sys.argv[1], sys.argv[2], src_lang="de", tgt_lang="en", chunk_bytes=1 << 18, progress=False)
print(json.dumps({"growth_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
"""


def test_peak_memory_is_flat_in_corpus_size(tmp_path: Path) -> None:
    """Peak RSS growth converting 4x more text stays the same (256 KiB chunks): nothing grows with the corpus."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import make_text_corpus
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    growth = {}
    for rows in (20_000, 80_000):
        make_text_corpus.generate(rows, tmp_path / f"text-{rows}", {"de": 20_000, "en": 15_000})
        with warnings.catch_warnings():
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    MEMORY_PROBE,
                    str(tmp_path / f"text-{rows}" / "train"),
                    str(tmp_path / f"out-{rows}"),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
        assert done.returncode == 0, done.stderr
        growth[rows] = json.loads(done.stdout)["growth_kib"] / 1024
    text_mib = (tmp_path / "text-80000" / "train.de").stat().st_size / 2**20
    assert text_mib > 15
    assert growth[80_000] < growth[20_000] + 8, growth  # MiB; holding the text alone would add > 15 MiB per side
