"""The ``arrowmt`` command line: a thin layer over the public API.

Structure: :func:`build_parser` calls one ``_add_<command>(commands)`` per command; each
adds its parser (every option with a ``help``), and sets ``func`` to its ``_cmd_<command>``,
which calls the public API and prints. ``convert`` and ``export`` hold one
``_add_convert_<source>``/``_add_export_<format>`` per kind. Adding a command is one such
pair of small functions and one line in :func:`build_parser`.

Errors: every user error ends the run with one line ``arrowmt: error: ...`` on stderr and
exit status 2, never a traceback: ``ArrowMTError`` (bad input, bad parameters, output
refused), ``OSError`` (a path the operating system refuses: missing, not a folder, no
permission) and usage errors. Anything else is a bug and keeps its traceback.

Messages speak CLI: library messages name a parameter as a call would
(``pass overwrite=True``) or, for ``InvalidParameterError``, start with its name
(``pair: expected ...``); :func:`cli_message` respells the parameters of the running
command as its flags (``--overwrite``, ``--pair: expected ...``), from the parser's own
table, so a message is written once and reads right in both places (CLI ``dest`` names
equal the API's parameter names).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from arrowmt._errors import ArrowMTError, InvalidParameterError
from arrowmt._version import __version__

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT (Ctrl-C)
EXIT_TERMINATED = 143  # 128 + SIGTERM (kill, a job scheduler's stop)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a tool killed by it: the reader of its output left
STOPPED = "arrowmt: {}; no partially written file was left"
INTERRUPTED_MESSAGE = STOPPED.format("interrupted")
TERMINATED_MESSAGE = STOPPED.format("terminated")
STOPPED_AFTER = "arrowmt: {} after the new output was published in full (the signal came while publishing)"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same clean-up runs (staging folders removed, OUT unchanged)."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the command runs (in the main thread), SIGTERM raises :class:`Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> NoReturn:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


PROG = "arrowmt"
CONVERT_HINT = "make one with 'arrowmt convert fairseq DATA_BIN OUT' or 'arrowmt convert text OUT ...'"


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one ``arrowmt: error:`` line (exit 2) pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()  # a subcommand names itself once: "error: info: ..."
        where = f"{command}: " if command else ""
        self.exit(EXIT_ERROR, f"{PROG}: error: {where}{message} (see '{self.prog} --help')\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI: user errors become one line on stderr and exit status 2 (see the module notes)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _sigterm_raises():
            return int(args.func(args) or 0)
    except ArrowMTError as exc:
        message = cli_message(str(exc), _flags(parser, args), isinstance(exc, InvalidParameterError))
    except BrokenPipeError:  # the reader of our output left (``arrowmt info --json | head``): nothing to report
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's own flush at exit writes nowhere
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # a path the user named that the OS refuses; ArrowMTError covers what arrowmt checks
        message = _os_error_message(exc)
    except KeyboardInterrupt as exc:
        print(_stopped_message(exc), file=sys.stderr)
        return _leave_now(EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED)
    hint = _dataset_hint(args)
    print(f"arrowmt: error: {message}{f'; {hint}' if hint else ''}", file=sys.stderr)
    return EXIT_ERROR


def _leave_now(code: int) -> int:
    """``code``; but when a request to an object store was abandoned by the signal, the process ends here
    (``os._exit``): the store's client would wait for that request at interpreter exit, for its whole timeout."""
    remote = sys.modules.get("arrowmt.storage._remote")  # loaded only where a URL was read
    if remote is not None and remote.requests_in_flight():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _stopped_message(exc: KeyboardInterrupt) -> str:
    """What Ctrl-C or SIGTERM left: nothing new, or (held while publishing) the complete new output."""
    from arrowmt.files import COMPLETED_NOTE

    how = "terminated" if isinstance(exc, Terminated) else "interrupted"
    return (STOPPED_AFTER if COMPLETED_NOTE in getattr(exc, "__notes__", ()) else STOPPED).format(how)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Memory-mapped Arrow corpora for MT training.")
    parser.add_argument("--version", action="version", version=f"arrowmt {__version__}", help="print the version")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_convert(commands)
    _add_info(commands)
    _add_verify(commands)
    _add_index(commands)
    _add_stage(commands)
    _add_order(commands)
    _add_export(commands)
    _add_filter(commands)
    _add_demo(commands)
    return parser


# ----- messages -------------------------------------------------------------------------------


def cli_message(message: str, flags: dict[str, str], names_parameter: bool = False) -> str:
    """``message`` with the API spelling of each parameter in ``flags`` (dest -> flag) replaced by its flag.

    ``name=True`` becomes ``--flag``, ``name=value`` ``--flag value``, a bare ``snake_case``
    name ``--flag``; with ``names_parameter`` (an ``InvalidParameterError``, whose message
    starts with the parameter's name), a leading ``name:`` becomes ``--flag:``.
    """
    for dest, flag in flags.items():
        name = re.escape(dest)
        message = re.sub(rf"(?<![\w.-]){name}=True\b", flag, message)
        message = re.sub(rf"(?<![\w.-]){name}=(['\"]?)([^\s'\",;)]+)\1", rf"{flag} \2", message)
        if "_" in dest:
            message = re.sub(rf"(?<![\w./-]){name}(?![\w/-]|\.\w)", flag, message)
        elif names_parameter:
            message = re.sub(rf"^{name}:", f"{flag}:", message)
    return message


def _flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """dest -> how the running (sub)command spells it: its first long option (``--src-lang``, not ``-s``), or the
    positional's name."""
    command = _running_parser(parser, args)
    flags = {}
    for action in command._actions:
        if action.dest in (argparse.SUPPRESS, "help"):
            continue
        options = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
        flags[action.dest] = options[0] if options else str(action.metavar or action.dest)
    return flags


def _running_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost subparser that parsed ``args`` (``arrowmt convert text`` -> the ``text`` parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _running_parser(action.choices[chosen], args)
    return parser


def _os_error_message(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename is not None else reason


def _dataset_hint(args: argparse.Namespace) -> str | None:
    """For commands reading an arrowmt folder (``path``): what to do when there is no dataset there."""
    from arrowmt._info import is_view_file
    from arrowmt.format import data_bin_hint, manifest_path
    from arrowmt.storage import is_url

    path = getattr(args, "path", None)
    if not isinstance(path, str) or is_url(path) or os.path.lexists(manifest_path(path)) or is_view_file(path):
        return None
    folder = Path(path)
    if not folder.exists():
        return f"{path} does not exist; {CONVERT_HINT}"
    if folder.is_dir() and data_bin_hint(folder):
        return None  # the reader's own message says what to do (Manifest.load)
    return CONVERT_HINT


# ----- commands -------------------------------------------------------------------------------


def _add_convert(commands: argparse._SubParsersAction) -> None:
    convert = commands.add_parser(
        "convert", help="make an arrowmt folder: from fairseq data-bin, raw parallel text or token tables"
    )
    kinds = convert.add_subparsers(dest="kind", required=True, metavar="SOURCE")
    _add_convert_fairseq(kinds)
    _add_convert_text(kinds)
    _add_convert_table(kinds)


def _add_export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="export an arrowmt folder to other formats")
    targets = export.add_subparsers(dest="target", required=True, metavar="FORMAT")
    _add_export_fairseq(targets)
    _add_export_parquet(targets)


def _add_info(commands: argparse._SubParsersAction) -> None:
    cmd = _add(
        commands,
        "info",
        "languages, provenance and, per split and column: rows, tokens, length percentiles, vocabulary, <unk> rate",
        _cmd_info,
        f"arrowmt folder, a view file (.view: the rows it keeps), or {URL_HELP}",
    )
    cmd.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    _cache_flags(cmd)
    _quiet_flag(cmd)


def _add_verify(commands: argparse._SubParsersAction) -> None:
    cmd = _add(
        commands,
        "verify",
        "full check of every file: SHA-256, structure, every offset, every id; the views, cached plans and copies' "
        "row orders and block tables beside them",
        _cmd_verify,
        f"arrowmt folder, or {URL_HELP} (its blocks are fetched and checked; --cache-dir keeps them)",
    )
    _cache_flags(cmd)
    _quiet_flag(cmd)


URL_HELP = "the URL of one (s3://bucket/corpus, gs://..., any pyarrow.fs URI; file:// is a local path)"


def _cache_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--cache-dir", default=None, help="cache of a URL PATH (default $ARROWMT_CACHE_DIR, ~/.cache/arrowmt)"
    )
    cmd.add_argument("--cache-limit", default=None, help="most bytes that cache keeps, e.g. 20G (default: no limit)")


def _add_index(commands: argparse._SubParsersAction) -> None:
    cmd = _add(commands, "index", "write the block indexes object storage readers need (conversion writes them)",
               _cmd_index)  # fmt: skip
    _quiet_flag(cmd)


def _cmd_index(args: argparse.Namespace) -> int:
    from arrowmt.writing import write_folder_indexes

    names = write_folder_indexes(args.path)
    print(f"{args.path}: wrote {len(names)} block index(es): {', '.join(names)}")
    return 0


def _add_order(commands: argparse._SubParsersAction) -> None:
    help_text = "copy a corpus with its training split stored in batch-plan order (one read per batch)"
    cmd = commands.add_parser("order", help=help_text, description=help_text)
    cmd.add_argument("corpus", help="arrowmt dataset folder")
    cmd.add_argument("out", help="output folder")
    cmd.add_argument("--split", default="train", help="split to store in plan order (default: train)")
    cmd.add_argument(
        "--max-tokens", type=int, default=None, help="the training's token budget (default: the samplers' default)"
    )
    cmd.add_argument("--max-sentences", type=int, default=None, help="the training's sentence limit per batch")
    cmd.add_argument("--required-batch-size-multiple", type=int, default=1, help="as in fairseq (default 1)")
    cmd.add_argument("--max-source-positions", type=int, default=None, help="rows longer than this are left out")
    cmd.add_argument("--max-target-positions", type=int, default=None, help="rows longer than this are left out")
    cmd.add_argument("--seed", type=int, default=1, help="the training's seed (default 1)")
    cmd.add_argument("--skip-invalid-size-inputs", action="store_true", help="skip rows over the limits")
    cmd.add_argument("--packed", action="store_true", help="the training's packed batches (packed=True)")
    cmd.add_argument("--batch-shapes", type=int, default=None, help="the training's batch_shapes=N")
    cmd.add_argument(
        "--cache-dir", default=None, help="where the plan is read or built (default: beside OUT, removed after)"
    )
    blocks = cmd.add_argument_group("LM blocks (a monolingual corpus: store its token blocks in plan order)")
    blocks.add_argument("--tokens-per-sample", type=int, default=None, help="block size, as in fairseq")
    blocks.add_argument("--sample-break-mode", help="none, complete or complete_doc (default none)")
    blocks.add_argument("--document-sep-len", type=int, help="as fairseq's TokenBlockDataset (default 1)")
    blocks.add_argument("--max-positions", type=int, default=None, help="blocks longer than this are left out")
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_order)


PAIR_ORDER_OPTIONS = ("max_source_positions", "max_target_positions", "packed", "batch_shapes")
BLOCK_ORDER_OPTIONS = ("max_positions", "sample_break_mode", "document_sep_len")


def _cmd_order(args: argparse.Namespace) -> int:
    from arrowmt.copies import order_blocks, order_copy

    common = ("split", "max_tokens", "max_sentences", "required_batch_size_multiple", "seed",
              "skip_invalid_size_inputs", "cache_dir", "overwrite")  # fmt: skip
    blocks = args.tokens_per_sample is not None
    other = PAIR_ORDER_OPTIONS if blocks else BLOCK_ORDER_OPTIONS
    wrong = [k for k in other if getattr(args, k) not in (None, False)]
    if wrong:
        kind = "LM blocks (--tokens-per-sample)" if blocks else "sentence pairs (no --tokens-per-sample)"
        raise InvalidParameterError(f"--{wrong[0].replace('_', '-')}: not an option of a copy of {kind}")
    options = {k: getattr(args, k) for k in common if k != "max_tokens" or args.max_tokens is not None}
    if blocks:
        block_options = {"tokens_per_sample": args.tokens_per_sample, "break_mode": args.sample_break_mode or "none",
                         "document_sep_len": 1 if args.document_sep_len is None else args.document_sep_len,
                         "max_positions": args.max_positions}  # fmt: skip
        manifest = order_blocks(args.corpus, args.out, progress=not args.quiet, **options, **block_options)
        what = " LM blocks"
    else:
        options.update({k: getattr(args, k) for k in PAIR_ORDER_OPTIONS})
        manifest = order_copy(args.corpus, args.out, progress=not args.quiet, **options)
        what = ""
    print(f"wrote {args.out}: split {args.split!r}{what} in plan order ({manifest.files[args.split].rows} rows)")
    return 0


def _add_stage(commands: argparse._SubParsersAction) -> None:
    help_text = "copy a corpus from object storage (s3://...) to a local folder: parallel, verified, resumable"
    cmd = commands.add_parser("stage", help=help_text, description=help_text)
    cmd.add_argument("url", help="URL of the corpus folder, e.g. s3://bucket/corpora/wmt")
    cmd.add_argument("out", help="local output folder")
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_stage)


def _cmd_stage(args: argparse.Namespace) -> int:
    from arrowmt.writing import stage

    manifest = stage(args.url, args.out, overwrite=args.overwrite, progress=not args.quiet)
    size = sum(entry.size for entry in manifest.files.values())
    print(f"staged {args.url} to {args.out}: {len(manifest.files)} split file(s), {size} bytes, verified")
    return 0


def _add_export_fairseq(targets: argparse._SubParsersAction) -> None:
    cmd = _add(targets, "fairseq", "write fairseq mmap .idx/.bin files", _cmd_export_fairseq)
    cmd.add_argument("out", help="output folder")
    _common_output_flags(cmd)


def _add_demo(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="convert the bundled Multi30k sample and iterate training batches",
        description="Convert the real Multi30k de-en sample shipped with arrowmt (29,000 training pairs), print its "
        "summary, then read one epoch of token-budget training batches and print their count, padding efficiency, "
        "throughput and a decoded pair.",
    )
    demo.add_argument("--out", default=None, help="keep the converted sample here (default: a temp folder)")
    demo.add_argument("--max-tokens", type=int, default=2048, help="token budget per batch (default 2048)")
    demo.add_argument("--overwrite", action="store_true", help="replace an existing dataset in --out")
    _quiet_flag(demo)
    demo.set_defaults(func=_cmd_demo)


def _add(
    sub: argparse._SubParsersAction,
    name: str,
    help_text: str,
    func: Callable[[argparse.Namespace], int],
    path_help: str = "arrowmt dataset folder",
) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=help_text, description=help_text)
    cmd.add_argument("path", help=path_help)
    cmd.set_defaults(func=func)
    return cmd


def _common_output_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output (its earlier files are removed once the new output is complete)",
    )
    _quiet_flag(cmd)


def _quiet_flag(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--quiet", action="store_true", help="no progress bars (they only show on a terminal anyway)")


def _add_convert_fairseq(kinds: argparse._SubParsersAction) -> None:
    cmd = kinds.add_parser("fairseq", help="fairseq data-bin folder (mmap, lazy/cached, Megatron)")
    cmd.add_argument("data_bin", help="fairseq data-bin folder")
    cmd.add_argument("out", help="output arrowmt folder")
    cmd.add_argument("--pair", default=None, help="language pair to convert when several exist, e.g. de-en")
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_convert_fairseq)


def _add_convert_text(kinds: argparse._SubParsersAction) -> None:
    cmd = kinds.add_parser("text", help="raw text ({pref}.{lang}, plain or .gz): one pair, several, or one language")
    cmd.add_argument("out", help="output arrowmt folder")
    cmd.add_argument(
        "-s", "--src-lang", "--source-lang", dest="src_lang", help="source language: reads {pref}.{src-lang}"
    )
    cmd.add_argument(
        "-t", "--tgt-lang", "--target-lang", dest="tgt_lang", help="target language: reads {pref}.{tgt-lang}"
    )
    cmd.add_argument(
        "--lang-pairs",
        default=None,
        help="instead of -s/-t: several pairs into one folder, e.g. de-en,fr-en (splits {split}.{src}-{tgt}, one "
        "dictionary for every language); a pair reads {pref}.{src}-{tgt}.{lang}, else {pref}.{lang}",
    )
    cmd.add_argument(
        "--lang",
        default=None,
        help="instead: one language, monolingual text {pref}.{lang} into column 'tokens' (a language model's corpus; "
        "fairseq's --only-source --source-lang); its dictionary takes the source options",
    )
    for split in ("train", "valid", "test"):
        cmd.add_argument(f"--{split}pref", default=None, help=f"{split} prefix(es), comma separated for shards")
    cmd.add_argument(
        "--srcdict", default=None, help="existing fairseq dict.txt for the source (for every language when joined)"
    )
    cmd.add_argument("--tgtdict", default=None, help="existing fairseq dict.txt for the target")
    cmd.add_argument(
        "--joined-dictionary", action="store_true", help="one dictionary for both languages (always with --lang-pairs)"
    )
    limits = (
        ("--thresholdsrc", "drop source words seen fewer times (default: keep all)"),
        ("--thresholdtgt", "drop target words seen fewer times (default: keep all)"),
        ("--nwordssrc", "source vocabulary size cap (default: none)"),
        ("--nwordstgt", "target vocabulary size cap (default: none)"),
    )
    for flag, help_text in limits:
        cmd.add_argument(flag, type=int, default=None, help=help_text)
    cmd.add_argument("--spm-model", default=None, help="sentencepiece model applied before encoding")
    cmd.add_argument(
        "--spm-sampling", action="store_true",
        help="also store every word's segmentations, so that each epoch draws every row's afresh (subword "
        "regularization; needs --spm-model)",
    )  # fmt: skip
    cmd.add_argument(
        "--spm-samples", type=int, default=None, metavar="K",
        help="removed: each epoch now draws every row afresh, with no number of samples (use --spm-sampling)",
    )  # fmt: skip
    cmd.add_argument(
        "--spm-alpha", type=float, default=None,
        help="sentencepiece's sampling alpha (default 0.1; readers may give another; a BPE model's dropout)",
    )  # fmt: skip
    cmd.add_argument("--workers", type=int, default=1, help="worker processes (text files are cut into chunks)")
    cmd.add_argument("--chunk-size", default="32M", help="text read per task, bytes (suffix K, M or G; default 32M)")
    cmd.add_argument("--shard-rows", type=int, default=None, help="write each split as files of this many rows")
    cmd.add_argument(
        "--dask-scheduler", default=None, help="run on this Dask cluster (tcp://host:8786; shared file system)"
    )
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_convert_text)


def _cmd_convert_fairseq(args: argparse.Namespace) -> int:
    from arrowmt.converters import convert_fairseq

    manifest = convert_fairseq(
        args.data_bin, args.out, pair=args.pair, overwrite=args.overwrite, progress=not args.quiet
    )
    _report_converted(args.out, manifest.files)
    return 0


def _cmd_convert_text(args: argparse.Namespace) -> int:
    from arrowmt.converters import convert_text, dask_executor, parse_byte_size, unknown_lines

    if args.spm_samples is not None:
        raise InvalidParameterError(
            f"spm_samples: sampled segmentations are drawn afresh every epoch from each word's exact law now, with "
            f"no number of samples; pass spm_sampling instead (got {args.spm_samples})"
        )
    with contextlib.ExitStack() as stack:
        executor, workers = None, args.workers
        if args.dask_scheduler:
            executor, threads = stack.enter_context(dask_executor(args.dask_scheduler))
            workers = args.workers if args.workers > 1 else threads
        manifest = convert_text(
            args.trainpref,
            args.out,
            **_options(args, "src_lang", "tgt_lang", "lang_pairs", "lang", "validpref", "testpref", "srcdict"),
            **_options(args, "tgtdict", "joined_dictionary", "spm_model", "spm_sampling", "shard_rows"),
            overwrite=args.overwrite,
            **_given(args, "thresholdsrc", "thresholdtgt", "nwordssrc", "nwordstgt", "spm_alpha"),
            workers=workers,
            chunk_bytes=parse_byte_size(args.chunk_size, "--chunk-size"),
            executor=executor,
            progress=not args.quiet,
        )
    report, warnings = unknown_lines(manifest)
    for line in report:
        print(line)
    for line in warnings:
        print(f"arrowmt: WARNING: {line}", file=sys.stderr)
    _report_converted(args.out, manifest.files)
    return 0


def _options(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options ``names`` as parsed, by name: what the command passes on to the API function of the same names."""
    return {name: getattr(args, name) for name in names}


def _given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options among ``names`` given on the command line (the API's defaults hold for the others)."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _report_converted(out: str, files: dict) -> None:
    rows = sum(entry.rows for entry in files.values())
    print(f"wrote {len(files)} split file(s), {rows} rows, to {out}")


def _cmd_info(args: argparse.Namespace) -> int:
    from arrowmt._info import format_summary, summarize, summary_dict
    from arrowmt.reading import local_folder

    path = local_folder(args.path, args.cache_dir, args.cache_limit)
    summaries = summarize(path, progress=not args.quiet)
    if args.json:
        print(json.dumps(summary_dict(path, summaries), indent=2, sort_keys=True))
    else:
        print(format_summary(path, summaries, shown_as=args.path))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from arrowmt.views import verify_dataset

    report = verify_dataset(args.path, progress=not args.quiet, cache_dir=args.cache_dir, cache_limit=args.cache_limit)
    for problem in report.problems:
        print(f"arrowmt: verify: {problem}", file=sys.stderr)
    if not report.ok:
        return EXIT_ERROR
    print(f"{args.path}: OK ({report.files} files, {report.rows} rows, {report.tokens} tokens)")
    return 0


def _cmd_export_fairseq(args: argparse.Namespace) -> int:
    from arrowmt.converters import export_fairseq

    prefixes = export_fairseq(args.path, args.out, overwrite=args.overwrite, progress=not args.quiet)
    print(f"wrote {len(prefixes)} fairseq mmap datasets to {args.out}")
    return 0


def _add_convert_table(kinds: argparse._SubParsersAction) -> None:
    cmd = kinds.add_parser(
        "table",
        help="Parquet or Arrow files of token ids (e.g. filtered with duckdb/polars/datasets) back to arrowmt",
        description="Each FILE becomes the split named by its stem (train.parquet -> train); the columns "
        "source/target (or tokens) must be lists of ids of the dictionaries of --like.",
    )
    cmd.add_argument("out", help="output arrowmt folder")
    cmd.add_argument("files", nargs="+", metavar="FILE", help="Parquet file, or Arrow IPC file or stream")
    like_help = "arrowmt folder whose languages and dictionaries the ids use"
    cmd.add_argument("--like", required=True, metavar="FOLDER", help=like_help)
    cmd.add_argument("--split", default=None, help="split name for a single FILE (default: the file's stem)")
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_convert_table)


def _cmd_convert_table(args: argparse.Namespace) -> int:
    from arrowmt.converters import convert_table, read_table_file

    if args.split is not None and len(args.files) != 1:
        raise InvalidParameterError(f"--split: expected a single FILE, got {len(args.files)} files")
    names = [args.split] if args.split is not None else [Path(f).name.split(".")[0] for f in args.files]
    tables = {name: read_table_file(f) for name, f in zip(names, args.files, strict=True)}
    manifest = convert_table(tables, args.out, like=args.like, overwrite=args.overwrite, progress=not args.quiet)
    _report_converted(args.out, manifest.files)
    return 0


def _add_export_parquet(targets: argparse._SubParsersAction) -> None:
    cmd = _add(targets, "parquet", "write <split>.parquet files for duckdb, polars, pandas", _cmd_export_parquet)
    cmd.add_argument("out", help="output folder")
    cmd.add_argument("--text", action="store_true", help="add <column>_text: the symbols joined by spaces")
    _common_output_flags(cmd)


def _cmd_export_parquet(args: argparse.Namespace) -> int:
    from arrowmt.converters import export_parquet

    files = export_parquet(args.path, args.out, text=args.text, overwrite=args.overwrite, progress=not args.quiet)
    print(f"wrote {len(files)} Parquet file(s) to {args.out}")
    return 0


def _add_filter(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "filter",
        help="write a view: the rows of a split that pass length, ratio and duplicate filters",
        description="Writes OUT_VIEW, a memory-mapped list of the kept rows (4 bytes each); open it with "
        "arrowmt.open_view_dataset(OUT_VIEW, CORPUS). Lengths count stored tokens, </s> included.",
    )
    cmd.add_argument("corpus", help="arrowmt dataset folder")
    cmd.add_argument("out_view", help="view file to write (e.g. CORPUS/views/clean.view)")
    cmd.add_argument("--split", default="train", help="split to filter (default: train)")
    cmd.add_argument("--max-len", type=int, default=None, help="drop rows with a side longer than this")
    cmd.add_argument("--min-len", type=int, default=None, help="drop rows with a side shorter than this")
    cmd.add_argument("--max-len-ratio", type=float, default=None, help="drop pairs whose sides differ more")
    cmd.add_argument("--dedup", action="store_true", help="drop exact repeats of an earlier pair")
    cmd.add_argument("--rows", default=None, help="keep only these rows: a .npy file or one number per line")
    _common_output_flags(cmd)
    cmd.set_defaults(func=_cmd_filter)


FILTER_CRITERIA = ("max_len", "min_len", "max_len_ratio", "dedup", "rows")


def _cmd_filter(args: argparse.Namespace) -> int:
    from arrowmt.views import REASONS, build_view

    if not any(getattr(args, name) not in (None, False) for name in FILTER_CRITERIA):
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in FILTER_CRITERIA)
        raise InvalidParameterError(f"expected at least one of {flags}, got none (the view would keep every row)")
    rows = None if args.rows is None else _row_list(Path(args.rows))
    criteria = _options(args, "split", "max_len", "min_len", "max_len_ratio", "dedup", "overwrite")
    report = build_view(args.corpus, args.out_view, rows=rows, **criteria)
    dropped = ", ".join(f"{reason.replace('_', ' ')} {report.dropped[reason]}" for reason in REASONS[1:])
    print(
        f"kept {report.kept} of {report.corpus_rows} rows (dropped: {dropped}; not listed "
        f"{report.dropped['not_listed']}) in {report.seconds:.2f} s: {args.out_view}"
    )
    return 0


def _row_list(path: Path) -> Any:
    """The ``--rows`` file as an array: a ``.npy`` array, else decimal row numbers separated by white space."""
    import numpy as np

    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        return np.array(path.read_text(encoding="utf-8").split(), dtype=np.int64)
    except (ValueError, OverflowError, EOFError) as exc:  # not numbers, past int64, not UTF-8, a damaged .npy
        raise InvalidParameterError(
            f"rows: expected {path} to hold row numbers (a .npy array of integers, or decimal numbers separated "
            f"by white space), got: {str(exc)[:200]}"
        ) from None


def _cmd_demo(args: argparse.Namespace) -> int:
    from arrowmt._demo import run_demo

    run_demo(out=args.out, max_tokens=args.max_tokens, overwrite=args.overwrite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
