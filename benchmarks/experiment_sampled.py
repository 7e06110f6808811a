"""A small experiment (issue 39): the plain example trained on the bundled Multi30k sample with fixed and with
sampled segmentations, the same budget, on the CPU; validation loss per epoch and test BLEU, as a plot.

Usage::

    python benchmarks/experiment_sampled.py --epochs 8 --seeds 1 2
    python benchmarks/experiment_sampled.py --segmentations sampled --alphas 0.1 0.5 --merge  # add sampled runs

A sentencepiece unigram model (``--vocab`` pieces) is trained on the training text; the corpus is converted with it
and its words' lattices (alpha ``--alphas``, one corpus each; each epoch draws every row afresh).
``examples/train_plain.py`` then trains the same small transformer (``--dim``, ``--max-tokens``) for ``--epochs``
epochs per seed, once on the fixed ids and once with ``--segmentation sampled``; the validation loss is always on
the fixed segmentation of ``valid``, BLEU on ``--bleu-sentences`` test sentences (greedy, detokenized). A model of
this size on 29,000 pairs is far from converged after a few epochs and differences between seeds are of the same
order as between settings: read the plot with the spread of the seeds. Results go to
``benchmarks/results/experiment-sampled.json`` and the plot to ``docs/img/subword-regularization.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import arrowmt

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SAMPLE = ROOT / "arrowmt" / "sample_data" / "multi30k"
VALID = re.compile(r"^epoch (\d+) valid loss (\S+)", re.MULTILINE)
BLEU = re.compile(r"^BLEU (\S+) on", re.MULTILINE)


def prepare(folder: Path, vocab: int, alpha: float) -> Path:
    import gzip

    import sentencepiece as spm

    text = folder / "text.txt"
    with text.open("w", encoding="utf-8") as out:
        for lang in ("de", "en"):
            with gzip.open(SAMPLE / f"train.{lang}.gz", "rt", encoding="utf-8") as lines:
                out.write(lines.read())
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / "spm"), vocab_size=vocab,
                                   num_threads=1, minloglevel=2)  # fmt: skip
    corpus = folder / "corpus"
    arrowmt.convert_text(str(SAMPLE / "train"), corpus, src_lang="de", tgt_lang="en", validpref=str(SAMPLE / "val"),
                         testpref=str(SAMPLE / "test"), spm_model=str(folder / "spm.model"), spm_sampling=True,
                         spm_alpha=alpha, progress=False)  # fmt: skip
    return corpus


def train(
    corpus: Path, segmentation: str, seed: int, alpha: float | None, args: argparse.Namespace
) -> dict[str, object]:
    command = [sys.executable, str(ROOT / "examples" / "train_plain.py"), "--data", str(corpus),
               "--epochs", str(args.epochs), "--dim", str(args.dim), "--max-tokens", str(args.max_tokens),
               "--seed", str(seed), "--segmentation", segmentation, "--show", "0",
               "--bleu-sentences", str(args.bleu_sentences)]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    seconds = time.perf_counter() - start
    valid = [float(loss) for _, loss in VALID.findall(done.stdout)]
    bleu = BLEU.findall(done.stdout)
    print(f"{segmentation} alpha {alpha} seed {seed}: valid {valid}, BLEU {bleu}, {seconds:.0f} s", flush=True)
    return {"segmentation": segmentation, "alpha": alpha, "seed": seed, "valid_loss": valid,
            "bleu": float(bleu[0]) if bleu else None, "seconds": seconds}  # fmt: skip


def run_key(run: dict[str, object]) -> tuple[object, ...]:
    return run["segmentation"], run.get("alpha"), run["seed"]


def merged(out: Path, runs: list[dict[str, object]]) -> list[dict[str, object]]:
    """The runs of ``out`` (if any) with ``runs`` added, a rerun replacing its earlier result."""
    earlier = json.loads(out.read_text())["runs"] if out.exists() else []
    new = {run_key(run) for run in runs}
    return [run for run in earlier if run_key(run) not in new] + runs


def plot(runs: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for run in runs:
        losses = run["valid_loss"]
        style = "-" if run["segmentation"] == "sampled" else "--"
        alpha = f", alpha {run['alpha']}" if run.get("alpha") is not None else ""
        label = f"{run['segmentation']}{alpha}, seed {run['seed']} (BLEU {run['bleu']})"
        ax.plot(range(1, len(losses) + 1), losses, style, marker="o", label=label)  # type: ignore[arg-type]
    ax.set_xlabel("epoch")
    ax.set_ylabel("valid loss per target token (fixed ids)")
    ax.set_title("Multi30k de-en, plain example, CPU")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.1], help="one sampled run per alpha and seed")
    p.add_argument("--segmentations", nargs="+", default=["fixed", "sampled"], choices=["fixed", "sampled"])
    p.add_argument("--merge", action="store_true", help="keep the earlier results of runs not repeated")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--bleu-sentences", type=int, default=1000)
    args = p.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for alpha in args.alphas:
            folder = Path(tmp) / f"alpha-{alpha}"
            folder.mkdir()
            corpus = prepare(folder, args.vocab, alpha)
            for seed in args.seeds:
                if "fixed" in args.segmentations and alpha == args.alphas[0]:
                    runs.append(train(corpus, "fixed", seed, None, args))
                if "sampled" in args.segmentations:
                    runs.append(train(corpus, "sampled", seed, alpha, args))
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    out = HERE / "results" / "experiment-sampled.json"
    if args.merge:
        runs = merged(out, runs)
    out.write_text(json.dumps({"args": vars(args), "runs": runs, "machine": machine}, indent=2) + "\n")
    plot(runs, ROOT / "docs" / "img" / "subword-regularization.png")
    print(f"saved {out} and docs/img/subword-regularization.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
