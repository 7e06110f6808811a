"""Raw text for several language pairs into one folder with one joined dictionary, against real fairseq.

fairseq's way to binarize several pairs with one shared dictionary: one dictionary over every train file (fairseq's own
``TranslationTask.build_dictionary``, the function ``fairseq-preprocess`` calls), then one
``fairseq-preprocess --srcdict D --tgtdict D`` run per pair into one data-bin. ``arrowmt convert
text --lang-pairs`` must give that dictionary byte for byte and, split for split, the rows fairseq
reads from that data-bin; ``translation_multi_simple_epoch_arrow`` must batch it as native fairseq
batches the data-bin.

The text mixes both layouts a pair may read: de-en and fr-en have their own files
(``train.de-en.de``, the recipe's), cs-en reads ``train.cs`` and ``train.en`` (aligned across
languages, like Multi30k), and every pair's valid reads ``valid.{lang}``.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arrowmt import (
    Dictionary,
    InputDataError,
    InvalidParameterError,
    Manifest,
    convert_fairseq,
    convert_text,
    open_dataset,
    open_mixture,
)
from arrowmt.testing import SOURCE, TARGET, main
from tests.conftest import fairseq_preprocess, fairseq_rows, import_fairseq, multi30k
from tests.test_fairseq_multi import (
    LANGTOKS,
    SAMPLING,
    assert_same_batches,
    epoch_batches,
    make_task,
    task_options,
)

PAIRS = ("de-en", "fr-en", "cs-en")
OWN_FILES = {"de-en": (0, 600), "fr-en": (300, 900)}  # per-pair train files: these lines of val
VALID_LINES = 200  # valid.{lang}: the first lines of test_2016_flickr, for every pair


def _lines(name: str, lang: str) -> list[str]:
    with gzip.open(multi30k(name, lang), "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pairs-text")
    for lang in ("cs", "de", "en", "fr"):
        _write(folder / f"train.{lang}", _lines("val", lang))
        _write(folder / f"valid.{lang}", _lines("test", lang)[:VALID_LINES])
    for pair, (start, stop) in OWN_FILES.items():
        for lang in pair.split("-"):
            _write(folder / f"train.{pair}.{lang}", _lines("val", lang)[start:stop])
    (folder / "train.de").unlink()  # de is only read through train.de-en.de
    return folder


def _train_files(text: Path) -> list[Path]:
    """The distinct train files the pairs read (train.en is cs-en's; de-en and fr-en have their own)."""
    own = [text / f"train.{pair}.{lang}" for pair in OWN_FILES for lang in pair.split("-")]
    return [*own, text / "train.cs", text / "train.en"]


@pytest.fixture(scope="module")
def native(text: Path) -> Path:
    """fairseq's recipe run by fairseq: its joined dictionary, then one fairseq-preprocess per pair."""
    import_fairseq()
    root = text.parent / "native"
    root.mkdir()
    files = [str(f) for f in _train_files(text)]
    build = (
        "from fairseq.tasks.translation import TranslationTask\n"
        f"d = TranslationTask.build_dictionary({files!r}, workers=1, threshold=2, nwords=-1, "
        "padding_factor=8)\n"
        f"d.save({str(root / 'dict.txt')!r})\n"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", build], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = []
    for pair in PAIRS:
        src, tgt = pair.split("-")
        train = text / (f"train.{pair}" if pair in OWN_FILES else "train")
        runs.append(
            f"--source-lang {src} --target-lang {tgt} --trainpref {train} --validpref {text / 'valid'} "
            f"--srcdict {root / 'dict.txt'} --tgtdict {root / 'dict.txt'} --destdir {root / 'bin'} --workers 1"
        )
    fairseq_preprocess(*(run.split() for run in runs))
    return root


@pytest.fixture(scope="module")
def ours(text: Path) -> Path:
    out = text.parent / "ours"
    convert_text(
        str(text / "train"),
        out,
        lang_pairs=",".join(PAIRS),
        validpref=str(text / "valid"),
        thresholdsrc=2,  # a joined dictionary takes the source limits (fairseq's --joined-dictionary)
        workers=2,
        chunk_bytes=4096,
        progress=False,
    )
    return out


def test_dictionary_is_fairseqs_joined_dictionary_over_every_train_file(native: Path, ours: Path) -> None:
    expected = (native / "dict.txt").read_bytes()
    for lang in ("cs", "de", "en", "fr"):
        assert (ours / f"dict.{lang}.txt").read_bytes() == expected, lang
        assert (native / "bin" / f"dict.{lang}.txt").read_bytes() == expected


def test_every_pair_split_equals_what_fairseq_reads_from_its_data_bin(native: Path, ours: Path) -> None:
    manifest = Manifest.load(ours)
    assert manifest.splits() == sorted(f"{split}.{pair}" for split in ("train", "valid") for pair in PAIRS)
    assert manifest.provenance["pairs"] == list(PAIRS)
    assert manifest.languages == {SOURCE: None, TARGET: None}
    sizes = {"de-en": 600, "fr-en": 600, "cs-en": 1014}
    for pair in PAIRS:
        src, tgt = pair.split("-")
        for split in ("train", "valid"):
            ds = open_dataset(ours, f"{split}.{pair}")
            assert ds.metadata.languages == {SOURCE: src, TARGET: tgt}
            assert len(ds) == (sizes[pair] if split == "train" else VALID_LINES)
            for column, lang in ((SOURCE, src), (TARGET, tgt)):
                rows = fairseq_rows(native / "bin" / f"{split}.{pair}.{lang}", "mmap")
                assert len(rows) == len(ds)
                for i, expected in enumerate(rows):
                    np.testing.assert_array_equal(ds.row(column, i).numpy(), expected, err_msg=f"{split}.{pair} {i}")


def test_equals_the_multi_pair_conversion_of_fairseqs_data_bin(native: Path, ours: Path, tmp_path: Path) -> None:
    converted = convert_fairseq(native / "bin", tmp_path / "from-bin", progress=False)
    assert sorted(converted.files) == sorted(Manifest.load(ours).files)
    mixture = open_mixture({pair: (ours, f"train.{pair}") for pair in PAIRS})
    assert list(mixture.sizes) == [600, 600, 1014]


def test_plugin_batches_it_as_native_fairseq_batches_the_data_bin(text: Path, native: Path, ours: Path) -> None:
    (text.parent / "langs.txt").write_text("cs\nde\nen\nfr\n")
    data = {"bin": native / "bin", "arrow": ours, "langs": text.parent / "langs.txt", "root": text.parent}
    options = task_options(data, *SAMPLING["temperature"], *LANGTOKS["src+decoder"])
    assert options[:2] == ["--lang-pairs", ",".join(PAIRS)]
    fairseq_task, arrow_task = make_task(data, True, options), make_task(data, False, options)
    for epoch in (1, 2):
        assert_same_batches(epoch_batches(fairseq_task, "train", epoch), epoch_batches(arrow_task, "train", epoch))
    assert_same_batches(epoch_batches(fairseq_task, "valid", 1), epoch_batches(arrow_task, "valid", 1))


def test_cli_gives_the_same_folder_and_shards(
    text: Path, ours: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["convert", "text", str(tmp_path / "cli"), "--trainpref", str(text / "train")]
    args += ["--validpref", str(text / "valid"), "--lang-pairs", ",".join(PAIRS), "--thresholdsrc", "2"]
    assert main([*args, "--quiet"]) == 0
    assert "[cs] train.cs-en source: 10132 tokens, 21.69% replaced by <unk>" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "cli")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(": 3 language pairs (de-en, fr-en, cs-en); from text")
    for name in ["train.de-en.arrow", "valid.cs-en.arrow", "dict.fr.txt"]:
        assert (tmp_path / "cli" / name).read_bytes() == (ours / name).read_bytes()
    assert main([*args, "--thresholdtgt", "2", "--shard-rows", "500", "--quiet", "--overwrite"]) == 0  # same value
    manifest = Manifest.load(tmp_path / "cli")
    assert manifest.shards("train.cs-en") == ["train.cs-en", "train.cs-en1", "train.cs-en2"]
    assert manifest.shards("train.de-en") == ["train.de-en", "train.de-en1"]
    sharded, whole = open_dataset(tmp_path / "cli", "train.cs-en"), open_dataset(ours, "train.cs-en")
    assert len(sharded) == len(whole) == 1014
    for i in (0, 499, 500, 1013):
        assert np.array_equal(sharded.row(SOURCE, i).numpy(), whole.row(SOURCE, i).numpy())


def test_a_shared_file_is_read_once_and_counted_once(text: Path, tmp_path: Path) -> None:
    """cs-en and a second pair en-cs read the same two files: the dictionary counts each file once."""
    both = convert_text(str(text / "train"), tmp_path / "both", lang_pairs=["cs-en", "en-cs"], progress=False)
    alone = convert_text(str(text / "train"), tmp_path / "one", lang_pairs="cs-en", progress=False)
    assert (tmp_path / "both" / "dict.cs.txt").read_bytes() == (tmp_path / "one" / "dict.cs.txt").read_bytes()
    assert both.provenance["inputs"]["train.en-cs"] == [{"en": str(text / "train.en"), "cs": str(text / "train.cs"),
                                                         "lines": 1014}]  # fmt: skip
    forward, backward = open_dataset(tmp_path / "both", "train.cs-en"), open_dataset(tmp_path / "both", "train.en-cs")
    assert np.array_equal(forward.row(SOURCE, 7).numpy(), backward.row(TARGET, 7).numpy())
    assert alone.provenance["unknown_tokens"]["train.cs-en"][SOURCE]["unknown"] == 0


def test_one_given_dictionary_serves_every_language(native: Path, text: Path, tmp_path: Path) -> None:
    given = str(native / "dict.txt")
    convert_text(None, tmp_path / "out", lang_pairs=PAIRS, validpref=str(text / "valid"), srcdict=given, progress=False)
    for lang in ("cs", "de", "en", "fr"):
        assert (tmp_path / "out" / f"dict.{lang}.txt").read_bytes() == Path(given).read_bytes()
    assert Manifest.load(tmp_path / "out").splits() == [f"valid.{pair}" for pair in sorted(PAIRS)]
    words = Dictionary.load(given)
    first = _lines("test", "fr")[0].split()
    row = open_dataset(tmp_path / "out", "valid.fr-en").row(SOURCE, 0).numpy()
    assert row.tolist() == [words.index(w) for w in first] + [words.eos]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lang_pairs": "de-en", "src_lang": "de"}, "src_lang: expected it unset when lang_pairs names the languages"),
        ({"lang_pairs": "de"}, "lang_pairs: expected 'src-tgt'.*got 'de'"),
        ({"lang_pairs": "de-de"}, "lang_pairs: expected 'src-tgt' with two different"),
        ({"lang_pairs": "de-en-fr"}, "no '-' inside a code"),
        ({"lang_pairs": "de-en,,fr-en"}, "lang_pairs: expected pairs like"),
        ({"lang_pairs": "de-en,de-en"}, r"each pair once, got \['de-en'\]"),
        ({"lang_pairs": "de-en1,de-en"}, r"pair 'de-en1' would name its splits like the shards of pair 'de-en'"),
        ({"lang_pairs": "de - en"}, r"lang_pairs: expected a language code without spaces or ',', got 'de '"),
        ({"lang_pairs": [("de", "en")]}, r"lang_pairs: expected pairs like 'de-en,fr-en' \(a string or a list"),
        ({"lang_pairs": 5}, "lang_pairs: expected pairs like"),
        ({"lang_pairs": "de-en", "srcdict": "a.txt", "tgtdict": "b.txt"}, "tgtdict: a joined dictionary is one file"),
        ({"lang_pairs": "de-en", "thresholdsrc": 2, "thresholdtgt": 3}, r"thresholdtgt: .*expected 0 \(unset\) or 2"),
        ({"src_lang": "de", "tgt_lang": "en", "joined_dictionary": True, "nwordstgt": 9}, r"nwordstgt: .*got 9"),
        ({"lang_pairs": "de-x/y"}, "lang_pairs: language 'x/y' cannot name a dictionary file: expected a plain"),
        ({"src_lang": "de"}, "src_lang, tgt_lang: expected both languages"),
    ],
)
def test_bad_options_are_refused_before_anything_is_read(kwargs: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        convert_text(str(tmp_path / "missing"), tmp_path / "out", progress=False, **kwargs)
    assert not (tmp_path / "out").exists()


def test_missing_and_half_per_pair_files_name_the_file(text: Path, tmp_path: Path) -> None:
    with pytest.raises(InputDataError, match=r"train\.de-cs\.de: text file missing \(also looked for "
                       r"train\.de-cs\.de\.gz, train\.de, train\.de\.gz\)"):  # fmt: skip
        convert_text(str(text / "train"), tmp_path / "out", lang_pairs="fr-cs,de-cs", progress=False)
    half = tmp_path / "half"
    half.mkdir()
    for name in ("train.de-en.de", "train.en"):
        (half / name).write_text("x\n")
    with pytest.raises(InputDataError, match=r"train\.en: pair de-en reads .*train\.de-en\.de \(a per-pair file"):
        convert_text(str(half / "train"), tmp_path / "out", lang_pairs="de-en", progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_refuses_mixed_language_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["convert", "text", str(tmp_path / "out"), "--trainpref", "t", "--lang-pairs", "de-en", "--src-lang", "de"]
    assert main(args) == 2
    assert "--src-lang: expected it unset when --lang-pairs names the languages, got 'de'" in capsys.readouterr().err


def test_one_dictionary_file_given_as_both_srcdict_and_tgtdict(native: Path, text: Path, tmp_path: Path) -> None:
    """fairseq's recipe passes ``--srcdict D --tgtdict D``: the same file twice is one joined dictionary."""
    given = str(native / "dict.txt")
    convert_text(None, tmp_path / "out", lang_pairs="cs-en", validpref=str(text / "valid"), srcdict=given,
                 tgtdict=given, progress=False)  # fmt: skip
    assert (tmp_path / "out" / "dict.cs.txt").read_bytes() == Path(given).read_bytes()


def test_comma_prefixes_are_shards_of_every_pair(text: Path, ours: Path, tmp_path: Path) -> None:
    """``--trainpref A,B`` with pairs: shards train.de-en, train.de-en1 (per-pair and aligned files alike)."""
    prefixes = f"{text / 'train'},{text / 'valid'}"
    manifest = convert_text(prefixes, tmp_path / "out", lang_pairs="de-en,cs-en", progress=False)
    assert manifest.shards("train.de-en") == ["train.de-en", "train.de-en1"]
    assert manifest.shards("train.cs-en") == ["train.cs-en", "train.cs-en1"]
    assert len(open_dataset(tmp_path / "out", "train.de-en")) == 600 + VALID_LINES
    inputs = manifest.provenance["inputs"]["train.de-en"]
    assert [entry["de"] for entry in inputs] == [str(text / "train.de-en.de"), str(text / "valid.de")]


def test_info_says_one_language_pair(text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    convert_text(str(text / "valid"), tmp_path / "out", lang_pairs="fr-en", progress=False)
    assert main(["info", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(": 1 language pair (fr-en); from text")
