"""fairseq plugin: the ``translation_arrow`` task trains fairseq models on an arrowmt folder.

Use it as a fairseq user directory::

    fairseq-train CORPUS --user-dir /path/to/arrowmt/integrations/fairseq_plugin --task translation_arrow ...

fairseq imports a user directory as a top-level module (here ``fairseq_plugin``)
after putting its parent folder (``arrowmt/integrations``) first on
``sys.path``. Imported that way, this module takes that folder off ``sys.path``
again (its file ``hf.py`` would otherwise shadow a same-named top-level
module), makes the ``arrowmt`` package importable if it is
not installed, and imports the plugin as ``arrowmt.integrations.fairseq_plugin``: every class
lives under that one module name (the task registers once, and DataLoader
workers can unpickle the dataset).

Needs fairseq: ``pip install 'arrowmt[fairseq]'``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PACKAGE = "arrowmt.integrations.fairseq_plugin"


def _bootstrap_user_dir() -> None:
    """Undo fairseq's ``sys.path`` insertion (this folder's parent) and make ``arrowmt`` importable."""
    here = Path(__file__).resolve()
    inserted, checkout = here.parents[1], here.parents[3]
    sys.path[:] = [p for p in sys.path if not (p and os.path.isdir(p) and Path(p).resolve() == inserted)]
    if importlib.util.find_spec("arrowmt") is None:
        sys.path.insert(0, str(checkout))


if __name__ != PACKAGE:  # imported by fairseq's --user-dir as a top-level module
    _bootstrap_user_dir()

from arrowmt._optional import require  # noqa: E402

require("fairseq", "fairseq", "the fairseq plugin")

import warnings  # noqa: E402

from arrowmt.integrations.accelerators import PIN_WARNING, has_accelerator  # noqa: E402

if not has_accelerator():  # fairseq's EpochBatchIterator always asks its DataLoader to pin; on a CPU that means nothing
    warnings.filterwarnings("ignore", message=PIN_WARNING, category=UserWarning)

from arrowmt.integrations.fairseq_plugin._refusals import report_refusals  # noqa: E402

report_refusals()

from arrowmt.integrations.fairseq_plugin._config import TranslationArrowConfig  # noqa: E402
from arrowmt.integrations.fairseq_plugin._dataset import ArrowPairDataset  # noqa: E402
from arrowmt.integrations.fairseq_plugin._lm_task import LanguageModelingArrowTask  # noqa: E402
from arrowmt.integrations.fairseq_plugin._multi_task import TranslationMultiSimpleEpochArrowTask  # noqa: E402
from arrowmt.integrations.fairseq_plugin._task import TASK_NAME, TranslationArrowTask  # noqa: E402

__all__ = ["TASK_NAME", "ArrowPairDataset", "TranslationArrowConfig", "TranslationArrowTask"]
