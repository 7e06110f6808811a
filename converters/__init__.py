"""Layer 2, conversion (installed as ``arrowmt.converters``): fairseq data-bin and raw text in, fairseq out.

Imports the format layer only; never torch.
"""
