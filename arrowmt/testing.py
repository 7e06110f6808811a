"""What the tests and the benchmarks use of arrowmt's private modules, in one table: not public API.

The public API is what ``arrowmt`` exports, and each package's face (``arrowmt.format``, ...) is what the
layers above it use. Tests and benchmarks also reach private helpers (a file format's constants, a reader's
internals to damage a file in one place, a planner's pure functions to check exact values); they import
them from here, not from the private modules, so the coupling is this one table. Each name loads its module
on first use (:mod:`arrowmt._lazy`). Anything here may change in any release without deprecation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt._arrays import groups_by
    from arrowmt._checks import check_integer, check_optional_integer
    from arrowmt._cli import INTERRUPTED_MESSAGE, TERMINATED_MESSAGE, build_parser, main
    from arrowmt._heap import release_free_heap
    from arrowmt._info import _readable, format_summary
    from arrowmt._optional import require
    from arrowmt.blocks._block_plan import MappedBlocks, write_table
    from arrowmt.blocks._blocks import (
        BREAK_MODES,
        block_bounds,
        lm_order,
        none_bounds,
        offsets_in_rows,
        packed_bounds,
        row_starts,
        shifted_heads,
    )
    from arrowmt.bucketing._bucketing import (
        batch_by_size,
        check_limit,
        check_rank,
        check_seed,
        compact_counts,
        drop_too_long,
        emitted_length,
        epoch_batch_order,
        filter_by_size,
        first_full_position,
        index_dtype,
        order_keys,
        ordered_indices,
        resume_start,
        shard_batches,
        shard_length,
        shuffled_range,
        smallest_uint,
        sort_key,
        stable_order,
        tail_overflows,
        too_long_error,
        window_chunk,
        window_starts,
        windowed_batch_order,
    )
    from arrowmt.bucketing._order import plan_order
    from arrowmt.bucketing._packing import pack_by_size, pack_ends
    from arrowmt.bucketing._shapes import choose_shapes, shape_batches
    from arrowmt.converters._fairseq_binary import detect_index_format, open_indexed, read_document_index, read_indexed
    from arrowmt.converters._fairseq_folder import discover
    from arrowmt.converters._from_table import read_table_file
    from arrowmt.converters._lattices import Edges, too_many_nodes, unigram_edges
    from arrowmt.converters._output import OutputFolder, column, special_ids_of
    from arrowmt.converters._pairs import arrow_split_names, fairseq_split_name
    from arrowmt.converters._parallel_text import (
        UNKNOWN_WARNING_RATE,
        Spilled,
        _parallelism,
        parse_byte_size,
        unknown_lines,
    )
    from arrowmt.converters._sampled import TIE_TOLERANCE, Segmenter, check_deterministic
    from arrowmt.converters._tasks import (
        FALLBACK_PARALLELISM,
        TaskRunner,
        WorkerLostError,
        dask_executor,
        executor_parallelism,
        open_runner,
    )
    from arrowmt.converters._text import (
        UNSPLIT_WHITESPACE,
        BadUtf8,
        Encoded,
        check_same_line_count,
        encode,
        encode_sentencepiece,
        encode_token_lists,
        read_lines,
        sentencepiece_pieces,
        split_lines,
        token_ids,
        tokenize,
    )
    from arrowmt.converters._text_chunks import TokenizeTask, _read_spill, text_chunks, tokenize_chunk
    from arrowmt.converters._text_inputs import prefix_files
    from arrowmt.copies._block_rows import cut_lengths, stored_starts
    from arrowmt.files._atomic import (
        COMPLETED_NOTE,
        STAGING_MARK,
        TEMP_PREFIX,
        StagedOutput,
        atomic_output,
        atomic_path,
        deferred_signals,
        remove_stale_staging,
        remove_stale_temps,
    )
    from arrowmt.files._chunks import (
        CHUNK_BYTES,
        TABLE_PREFIX,
        CheckedArray,
        chunk_count,
        chunk_crcs,
        pack_table,
        parse_table_prefix,
        table_bytes,
    )
    from arrowmt.files._digests import file_sha256
    from arrowmt.files._locks import LOCK_SUFFIX, OutputLock, lock_path
    from arrowmt.files._sidefile import (
        BLOCKS_FORMAT,
        HEADER_BYTES,
        PLAN_FORMAT,
        VIEW_FORMAT,
        SideFile,
        SideFormat,
        open_side_file,
        write_side_file,
    )
    from arrowmt.format._manifest import MAX_JSON_BYTES, plain_name_error, split_path
    from arrowmt.format._metadata import SplitMetadata
    from arrowmt.format._schema import CACHE_DIR_NAME, MANIFEST_NAME, METADATA_KEY, SOURCE, TARGET, TOKENS
    from arrowmt.format._symbols import text_symbols_digest
    from arrowmt.format._vocab import SPECIALS
    from arrowmt.integrations.fairseq_plugin._batches import ReadAheadBatches, ReadAheadEpochBatchIterator
    from arrowmt.integrations.fairseq_plugin._task import _check_dictionary
    from arrowmt.io._advice import (
        PAGE,
        WordRanges,
        check_access,
        page_runs,
        sample_pages,
        spread,
        will_need,
        word_page_runs,
    )
    from arrowmt.io._advisor import Advisor, probe_vector_madvise
    from arrowmt.io._prefetch import Prefetcher
    from arrowmt.mixing._mixing import check_weights, resample, resample_counts, temperature_ratios
    from arrowmt.mixing._mixture_plan import plan_folder
    from arrowmt.plans._orders import BATCH_ORDERS, PlanOrder, Shuffle
    from arrowmt.plans._plan import build_plan, key_fields, load_plan, sides
    from arrowmt.plans._plan_cache import PlanArrays, load_or_build_plan, plan_key, plan_path, read_plan, write_plan
    from arrowmt.reading._block_index import INDEX_FORMAT, index_name, pinned_at, read_block_index
    from arrowmt.reading._mirror import attached_file, check_cache_limit
    from arrowmt.reading._offsets_crc import (
        OFFSETS_CRC_KEY,
        OFFSETS_PIECES_BINARY_KEY,
        OFFSETS_PIECES_KEY,
        PIECE_ROWS,
        STRETCH_PIECE_ROWS,
        ManyOffsetChecks,
        OffsetChecks,
        encode_legacy_offsets_crcs,
        offsets_crc,
    )
    from arrowmt.reading._ragged import Ragged
    from arrowmt.reading._reader import SplitFile, ensure_offsets_checked, open_split_file
    from arrowmt.reading._spans import Spans, as_spans, take_flat
    from arrowmt.segments._bits import epoch_key, occurrence_keys
    from arrowmt.segments._lattice import LATTICE_FORMAT, LatticeTables
    from arrowmt.segments._law import row_sums
    from arrowmt.segments._sampled import sampled_folder
    from arrowmt.splits._dictionaries import file_digest
    from arrowmt.storage._state import NO_USE, CacheState, add_use, use_keys
    from arrowmt.storage._store import BlockStore, furthest
    from arrowmt.stored._row_order import NOTED, ORDER_FORMAT, inverse_order, open_row_order, write_row_order
    from arrowmt.training._batch import GatheredBatch
    from arrowmt.training._gather import gather_padded, gather_padded_shifted, padded_width, valid_mask
    from arrowmt.training._options import Walk, walk_of
    from arrowmt.training._resume import sampler_state, saved_workers
    from arrowmt.training._sampler import PlanSampler
    from arrowmt.training._world import World
    from arrowmt.writing._indexing import write_block_indexes
    from arrowmt.writing._writer import (
        ColumnData,
        choose_rows_per_batch,
        choose_rows_per_batch_streaming,
        column_info,
        open_split_writer,
        write_split,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
