"""Layer 9, conversion (installed as ``arrowmt.converters``): fairseq data-bin and raw text in, fairseq out; the
output folder every writer of a corpus fills (``OutputFolder``, also the copies' writer).

Imports the corpus layers below it (files to views); never torch.
Other packages import from here, not from the private modules. Each name loads its module on first use
(:mod:`arrowmt._lazy`), so a process loads only the converter it runs: the CLI's ``convert`` never loads the text
converter, and a spawned text-conversion worker (which imports its task's module, hence this face) never loads the
table or Parquet converters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.converters._fairseq_export import export_fairseq
    from arrowmt.converters._fairseq_folder import convert_fairseq, discover
    from arrowmt.converters._from_table import convert_table, read_table_file
    from arrowmt.converters._output import OutputFolder, column, special_ids_of
    from arrowmt.converters._parallel_text import convert_text, convert_with_options, parse_byte_size, unknown_lines
    from arrowmt.converters._parquet_export import export_parquet
    from arrowmt.converters._sampled import add_sampled_segmentations
    from arrowmt.converters._tasks import dask_executor
    from arrowmt.converters._text_inputs import TextConversion

__getattr__, __dir__, __all__ = attach(__name__, __file__)
