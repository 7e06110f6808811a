"""Convert a multilingual fairseq data-bin (several language pairs in one folder) into one arrowmt folder.

fairseq's multilingual recipe runs ``fairseq-preprocess --srcdict D --tgtdict D`` once
per pair into one folder: ``{split}.{src}-{tgt}.{lang}.{idx,bin}`` for every pair and
``dict.{lang}.txt`` copies of the shared dictionary. Each pair's split becomes the
arrowmt split ``{split}.{src}-{tgt}`` (fairseq's shard ``train1`` becomes
``train.{src}-{tgt}1``, a shard of ``train.{src}-{tgt}``), every ``dict.{lang}.txt``
is copied, and the manifest lists the pairs (``Manifest.language_pairs``); its
``languages`` are None because they differ from split to split (each split's
metadata names its own). ``translation_multi_simple_epoch_arrow`` and
:func:`arrowmt.open_mixture` read such a folder.
"""

from __future__ import annotations

import logging
from pathlib import Path

from arrowmt.converters._fairseq_binary import detect_index_format
from arrowmt.converters._fairseq_folder import Discovered, _load_dict, _read_splits, _Side, fairseq_provenance
from arrowmt.converters._output import OutputFolder, special_ids_of
from arrowmt.converters._pairs import arrow_split_names
from arrowmt.format import SOURCE, TARGET, Manifest
from arrowmt.writing import ColumnData

logger = logging.getLogger(__name__)


def convert_multi_pair(data_bin: Path, out: Path, found: Discovered, overwrite: bool, progress: bool) -> Manifest:
    """Every pair of ``found`` (see :func:`arrowmt.converters._fairseq_folder.discover`) into one folder at ``out``."""
    pairs = sorted(found.pairs)
    if found.mono:
        logger.warning("%s: monolingual splits %s are not converted with the pairs", data_bin, found.mono)
    first_src, first_tgt = pairs[0]
    fmt = detect_index_format(data_bin / f"{found.pairs[pairs[0]][0]}.{first_src}-{first_tgt}.{first_src}.idx")
    languages = sorted({lang for pair in pairs for lang in pair})
    dicts = {lang: _load_dict(data_bin, lang) for lang in languages}
    inputs: dict[str, dict[str, ColumnData]] = {}
    for src, tgt in pairs:
        sides = [_Side(role, lang, *dicts[lang]) for role, lang in ((SOURCE, src), (TARGET, tgt))]
        splits = found.pairs[(src, tgt)]
        read = _read_splits(data_bin, splits, sides, lambda split, lang, s=src, t=tgt: f"{split}.{s}-{t}.{lang}")
        names = arrow_split_names(splits, src, tgt)
        inputs.update({names[split]: columns for split, columns in read.items()})
    with OutputFolder.prepare(out, {SOURCE: None, TARGET: None}, f"fairseq-{fmt}", overwrite, progress) as folder:
        for lang, (path, dictionary) in dicts.items():
            folder.add_dictionary(lang, dictionary, source=path)
        folder.manifest.language_pairs = [f"{s}-{t}" for s, t in pairs]
        for split, columns in inputs.items():
            folder.write(split, columns, special_ids_of(dicts[first_src][1]))
        folder.manifest.provenance = {**folder.manifest.provenance, **fairseq_provenance(data_bin, inputs)}
        return folder.finish()
