"""The ``arrowmt`` command line: a thin layer over the public API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from arrowmt._errors import ArrowMTError
from arrowmt._version import __version__

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; ArrowMTError becomes a one-line message and exit code 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ArrowMTError as exc:
        print(f"arrowmt: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("arrowmt: interrupted; no partial output was left", file=sys.stderr)
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arrowmt", description="Memory-mapped Arrow corpora for MT training.")
    parser.add_argument("--version", action="version", version=f"arrowmt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="convert fairseq data-bin or raw parallel text")
    kinds = convert.add_subparsers(dest="kind", required=True)
    _add_convert_fairseq(kinds)
    _add_convert_text(kinds)
    _add(commands, "info", "rows, tokens, length percentiles, languages, vocab sizes", _cmd_info)
    _add(commands, "verify", "full structural check of every file", _cmd_verify)
    export = commands.add_parser("export", help="export back to other formats")
    targets = export.add_subparsers(dest="target", required=True)
    fs = _add(targets, "fairseq", "write fairseq mmap .idx/.bin files", _cmd_export_fairseq)
    fs.add_argument("out", help="output folder")
    _common_output_flags(fs)
    demo = commands.add_parser("demo", help="convert the bundled Multi30k sample and iterate training batches")
    demo.add_argument("--out", default=None, help="keep the converted sample here (default: a temp folder)")
    demo.add_argument("--max-tokens", type=int, default=2048)
    demo.set_defaults(func=_cmd_demo)
    return parser


def _add(
    sub: argparse._SubParsersAction, name: str, help_text: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=help_text, description=help_text)
    cmd.add_argument("path", help="arrowmt dataset folder")
    cmd.set_defaults(func=func)
    return cmd


def _common_output_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--overwrite", action="store_true", help="replace an existing output")
    cmd.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_convert_fairseq(kinds: argparse._SubParsersAction) -> None:
    cmd = kinds.add_parser("fairseq", help="fairseq data-bin folder (mmap, lazy/cached, Megatron)")
    cmd.add_argument("data_bin", help="fairseq data-bin folder")
    cmd.add_argument("out", help="output arrowmt folder")
    cmd.add_argument("--pair", default=None, help="language pair to convert when several exist, e.g. de-en")
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_convert_fairseq)


def _add_convert_text(kinds: argparse._SubParsersAction) -> None:
    cmd = kinds.add_parser("text", help="raw parallel text ({pref}.{lang}, plain or .gz)")
    cmd.add_argument("out", help="output arrowmt folder")
    cmd.add_argument("--src-lang", "--source-lang", dest="src_lang", required=True)
    cmd.add_argument("--tgt-lang", "--target-lang", dest="tgt_lang", required=True)
    for split in ("train", "valid", "test"):
        cmd.add_argument(f"--{split}pref", default=None, help=f"{split} prefix(es), comma separated for shards")
    cmd.add_argument("--srcdict", default=None, help="existing fairseq dict.txt for the source")
    cmd.add_argument("--tgtdict", default=None, help="existing fairseq dict.txt for the target")
    cmd.add_argument("--joined-dictionary", action="store_true", help="one dictionary for both languages")
    cmd.add_argument("--thresholdsrc", type=int, default=0, help="drop source words seen fewer times")
    cmd.add_argument("--thresholdtgt", type=int, default=0, help="drop target words seen fewer times")
    cmd.add_argument("--nwordssrc", type=int, default=-1, help="source vocabulary size cap")
    cmd.add_argument("--nwordstgt", type=int, default=-1, help="target vocabulary size cap")
    cmd.add_argument("--spm-model", default=None, help="sentencepiece model applied before encoding")
    cmd.add_argument("--workers", type=int, default=1, help="parallel encoding processes")
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_convert_text)


def _cmd_convert_fairseq(args: argparse.Namespace) -> int:
    from arrowmt.converters._fairseq_folder import convert_fairseq

    manifest = convert_fairseq(
        args.data_bin, args.out, pair=args.pair, overwrite=args.overwrite, progress=not args.quiet
    )
    _report_converted(args.out, manifest.files)
    return 0


def _cmd_convert_text(args: argparse.Namespace) -> int:
    from arrowmt.converters._parallel_text import convert_text

    manifest = convert_text(
        args.trainpref,
        args.out,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
        validpref=args.validpref,
        testpref=args.testpref,
        srcdict=args.srcdict,
        tgtdict=args.tgtdict,
        joined_dictionary=args.joined_dictionary,
        thresholdsrc=args.thresholdsrc,
        thresholdtgt=args.thresholdtgt,
        nwordssrc=args.nwordssrc,
        nwordstgt=args.nwordstgt,
        spm_model=args.spm_model,
        workers=args.workers,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    _report_converted(args.out, manifest.files)
    return 0


def _report_converted(out: str, files: dict) -> None:
    rows = sum(entry.rows for entry in files.values())
    print(f"wrote {len(files)} split file(s), {rows} rows, to {out}")


def _cmd_info(args: argparse.Namespace) -> int:
    from arrowmt._info import format_summary, summarize

    print(format_summary(args.path, summarize(args.path)))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from arrowmt.format._verify import verify_dataset

    report = verify_dataset(args.path)
    for problem in report.problems:
        print(f"arrowmt: verify: {problem}", file=sys.stderr)
    if not report.ok:
        return EXIT_ERROR
    print(f"{args.path}: OK ({report.files} files, {report.rows} rows, {report.tokens} tokens)")
    return 0


def _cmd_export_fairseq(args: argparse.Namespace) -> int:
    from arrowmt.converters._fairseq_export import export_fairseq

    prefixes = export_fairseq(args.path, args.out, overwrite=args.overwrite, progress=not args.quiet)
    print(f"wrote {len(prefixes)} fairseq mmap datasets to {args.out}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from arrowmt._demo import run_demo

    run_demo(out=args.out, max_tokens=args.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
