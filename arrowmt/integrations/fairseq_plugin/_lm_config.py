"""The ``language_modeling_arrow`` task's options: fairseq's ``language_modeling`` options plus arrowmt's own.

fairseq builds its command line from these dataclass fields and reads their
annotations at run time, so this module must not use postponed annotations
(``from __future__ import annotations``). arrowmt's own options are those of
``translation_arrow`` (same names, defaults and help).
"""

from dataclasses import dataclass, field, fields

from fairseq.tasks.language_modeling import LanguageModelingConfig
from omegaconf import II

from arrowmt.integrations.fairseq_plugin._config import TranslationArrowConfig

_SHARED = {f.name: f for f in fields(TranslationArrowConfig)}


@dataclass
class LanguageModelingArrowConfig(LanguageModelingConfig):
    """``--data`` is a monolingual arrowmt folder (colon-separated folders are used one per epoch, as in fairseq).

    The dictionary is the folder's (``dict.txt`` or ``dict.<lang>.txt``, as converted).
    """

    arrow_plan_cache_dir: str = field(
        default=_SHARED["arrow_plan_cache_dir"].default, metadata=_SHARED["arrow_plan_cache_dir"].metadata
    )
    arrow_prefetch: int = field(default=_SHARED["arrow_prefetch"].default, metadata=_SHARED["arrow_prefetch"].metadata)
    arrow_order_copy: str = field(default="", metadata=_SHARED["arrow_order_copy"].metadata)
    arrow_cache_dir: str = field(default="", metadata=_SHARED["arrow_cache_dir"].metadata)
    arrow_cache_limit: str = field(default="", metadata=_SHARED["arrow_cache_limit"].metadata)
    rebuild_batches: bool = field(
        default=_SHARED["rebuild_batches"].default, metadata=_SHARED["rebuild_batches"].metadata
    )
    train_subset: str = II("dataset.train_subset")  # the split --arrow-order-copy copies
