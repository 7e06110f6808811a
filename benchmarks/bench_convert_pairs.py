"""Raw text of several language pairs, one joined dictionary: fairseq vs ``arrowmt convert text --lang-pairs``.

fairseq's way is its own ``TranslationTask.build_dictionary`` over every pair's train files
(what ``fairseq-preprocess`` calls to build a dictionary) and then one ``fairseq-preprocess
--srcdict D --tgtdict D`` per pair into one data-bin; arrowmt's is one ``arrowmt convert text
--lang-pairs``. Both run with ``--workers`` as one process tree each, measured like
``bench_convert.py`` (wall, CPU of the tree, peak RSS per process), on synthetic corpora of
``make_text_corpus.py``: one per pair (``train.{src}-{tgt}.{lang}``, the recipe's per-pair files;
a language's words are the same in every pair, the sentences differ).

Then it checks both made the same thing: the dictionary byte for byte (every ``dict.{lang}.txt``)
and every row of every pair against fairseq's ``train.{pair}.{lang}.bin/.idx``.

Usage::

    nice python benchmarks/bench_convert_pairs.py --rows 100000 --workers 2 --repeat 2

Results go to ``benchmarks/results/convert-pairs-<n>x<rows>.json``; the markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import make_text_corpus  # noqa: E402
from bench_convert import BIN, machine, run_once, same_rows, table  # noqa: E402

VOCAB = {"en": 80_000}  # and 120,000 words for every other language
DEFAULT_VOCAB = 120_000


def corpora(pairs: list[str], rows: int, data: Path) -> dict:
    """One corpus per pair (generated once), and the totals the table reports."""
    saved = data / "corpus.json"
    if saved.exists():
        return json.loads(saved.read_text())
    words = text_bytes = 0
    for k, pair in enumerate(pairs):
        langs = tuple(pair.split("-"))
        vocab = {lang: VOCAB.get(lang, DEFAULT_VOCAB) for lang in langs}
        info = make_text_corpus.generate(
            rows, data, vocab, langs=langs, prefix=f"train.{pair}", seed=make_text_corpus.SEED + 1000 * (k + 1)
        )
        words += sum(info["words"].values())
        text_bytes += sum(info["bytes"].values())
    info = {"pairs": pairs, "rows_per_pair": rows, "tokens": words + 2 * rows * len(pairs), "text_bytes": text_bytes}
    saved.write_text(json.dumps(info, indent=1) + "\n")
    return info


def fairseq_recipe(pairs: list[str], workers: int, data: Path, out: Path) -> list[str]:
    files = [str(data / f"train.{pair}.{lang}") for pair in pairs for lang in pair.split("-")]
    build = (
        "from fairseq.tasks.translation import TranslationTask; "
        f"TranslationTask.build_dictionary({files!r}, workers={workers}, threshold=0, nwords=-1, "
        f"padding_factor=8).save({str(out / 'dict.txt')!r})"
    )
    steps = [f"mkdir -p {out}", f"{sys.executable} -W ignore -c {shlex.quote(build)}"]
    for pair in pairs:
        src, tgt = pair.split("-")
        steps.append(
            f"{BIN / 'fairseq-preprocess'} --source-lang {src} --target-lang {tgt} --trainpref {data}/train.{pair} "
            f"--srcdict {out}/dict.txt --tgtdict {out}/dict.txt --destdir {out} --workers {workers} "
            "--dataset-impl mmap"
        )
    return ["bash", "-c", " && ".join(steps)]


def arrowmt_command(pairs: list[str], workers: int, data: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "arrowmt._cli", "convert", "text", str(out), "--lang-pairs", ",".join(pairs),
            "--trainpref", str(data / "train"), "--workers", str(workers), "--quiet", "--overwrite"]  # fmt: skip


def check_same(pairs: list[str], fairseq_out: Path, arrowmt_out: Path) -> dict:
    joined = (fairseq_out / "dict.txt").read_bytes()
    langs = sorted({lang for pair in pairs for lang in pair.split("-")})
    result: dict = {
        "dictionaries_identical": all((arrowmt_out / f"dict.{lang}.txt").read_bytes() == joined for lang in langs)
    }
    for pair in pairs:
        langs_of = tuple(pair.split("-"))
        result[pair] = same_rows(fairseq_out / f"train.{pair}", arrowmt_out / f"train.{pair}.arrow", langs_of)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="de-en,fr-en,cs-en")
    parser.add_argument("--rows", type=int, default=100_000, help="pairs of sentences per language pair")
    parser.add_argument("--systems", nargs="+", default=["fairseq", "arrowmt"], choices=["fairseq", "arrowmt"])
    parser.add_argument("--workers", nargs="+", type=int, default=[2])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cpus", nargs="+", type=int, default=None, help="pin every run to these cores")
    args = parser.parse_args()
    pairs = args.pairs.split(",")
    data = ROOT / "bench-data" / f"pairs-{len(pairs)}x{args.rows}"
    saved = HERE / "results" / f"convert-pairs-{len(pairs)}x{args.rows}.json"
    results = json.loads(saved.read_text()) if saved.exists() else {"runs": {}}
    info = corpora(pairs, args.rows, data)
    results.update(rows=args.rows * len(pairs), tokens=info["tokens"], text_bytes=info["text_bytes"])
    results.update(pairs=pairs, machine=machine())
    for system in args.systems:
        for workers in args.workers:
            out = data / f"out-{system}-{workers}"
            argv = (fairseq_recipe if system == "fairseq" else arrowmt_command)(pairs, workers, data, out)
            runs = [run_once(argv, out, args.cpus) for _ in range(args.repeat)]
            if runs:
                results["runs"][f"{system}-{workers}"] = runs
                print(system, workers, json.dumps(runs), flush=True)
    fairseq_out = next((p for p in sorted(data.glob("out-fairseq-*")) if (p / "dict.txt").exists()), None)
    arrowmt_out = next((p for p in sorted(data.glob("out-arrowmt-*")) if (p / "arrowmt.json").exists()), None)
    if fairseq_out and arrowmt_out:
        compared = {"compared": [fairseq_out.name, arrowmt_out.name]}
        results["identical_to_fairseq"] = {**compared, **check_same(pairs, fairseq_out, arrowmt_out)}
    saved.parent.mkdir(exist_ok=True)
    saved.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{len(pairs)} language pairs: {', '.join(pairs)}; one joined dictionary")
    print(table(results))
    print(json.dumps({k: results.get(k) for k in ("machine", "identical_to_fairseq")}))


if __name__ == "__main__":
    main()
