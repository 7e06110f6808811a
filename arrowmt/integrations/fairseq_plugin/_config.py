"""The ``translation_arrow`` task's options: fairseq's translation options plus arrowmt's own.

fairseq builds its command line from these dataclass fields and reads their
annotations at run time, so this module must not use postponed annotations
(``from __future__ import annotations``) and options use concrete types.
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks.translation import TranslationConfig

SEGMENTATION_HELP = (
    "fixed: the ids the folder was converted with; sampled: each training pair's segmentation drawn afresh each "
    "epoch from its words' stored lattices (convert text --spm-sampling), batched by that epoch's lengths"
)
SPM_ALPHA_HELP = "with --arrow-segmentation sampled: sentencepiece's alpha (default: the one the samples record)"
CACHE_DIR_HELP = "node-local cache of a --data URL (s3://...; default $ARROWMT_CACHE_DIR or ~/.cache/arrowmt)"
CACHE_LIMIT_HELP = "most bytes the cache of a --data URL keeps, e.g. 20G (default: $ARROWMT_CACHE_LIMIT, else all)"


@dataclass
class TranslationArrowConfig(TranslationConfig):
    """``--data`` is an arrowmt folder (colon-separated folders are used one per epoch, as in fairseq).

    The language pair comes from the folder's manifest; ``-s``/``-t`` may pick
    either direction of it (``-s en -t de`` on a de-en folder trains en->de from
    the same files). Dictionaries are the folder's ``dict.<lang>.txt``.
    """

    arrow_plan_cache_dir: str = field(
        default="",
        metadata={
            "help": "folder for arrowmt's shared batch-plan files, and with --arrow-segmentation sampled each epoch's "
            "copy in its samples (default: .arrowmt-cache inside the data folder)"
        },
    )
    arrow_train_view: str = field(
        default="",
        metadata={"help": "read the training split through this arrowmt view file (arrowmt filter) of the data folder"},
    )
    arrow_segmentation: str = field(
        default="fixed",
        metadata={"help": SEGMENTATION_HELP},
    )
    arrow_spm_alpha: Optional[float] = field(  # noqa: UP045  # fairseq reads Optional[...], not float | None
        default=None,
        metadata={"help": SPM_ALPHA_HELP},
    )
    arrow_order_copy: str = field(
        default="",
        metadata={
            "help": "write a copy of the data folder to this folder with the training split stored in the order "
            "this command's batches read it (arrowmt order with every batching option of the command), then exit; "
            "train on it with the same command, --data set to the copy"
        },
    )
    arrow_cache_dir: str = field(
        default="",
        metadata={"help": CACHE_DIR_HELP},
    )
    arrow_cache_limit: str = field(
        default="",
        metadata={"help": CACHE_LIMIT_HELP},
    )
    arrow_prefetch: int = field(
        default=8,
        metadata={"help": "batches whose rows arrowmt reads ahead from disk while a batch is used (0: off)"},
    )
    arrow_shuffle_window: Optional[int] = field(  # noqa: UP045  # fairseq reads Optional[...], not int | None
        default=None,
        metadata={
            "help": "shuffle each epoch's batches within windows of about N batches (arrowmt's shuffle_window: a "
            "copy made by 'arrowmt order' is then read in long requests); default: fairseq's shuffle"
        },
    )
    arrow_batch_shapes: Optional[int] = field(  # noqa: UP045  # fairseq reads Optional[...], not int | None
        default=None,
        metadata={
            "help": "pad the batches to at most N shapes chosen to pad the fewest tokens (for torch.compile or CUDA "
            "graphs; arrowmt's batch_shapes); fairseq's --num-batch-buckets is not supported, this replaces it"
        },
    )
    rebuild_batches: bool = field(
        default=False,
        metadata={
            "help": "plan the batches anew each epoch, ordered under seed + epoch "
            "(fairseq's rebuild_batches; by default they are planned once, when the iterator is created)"
        },
    )
