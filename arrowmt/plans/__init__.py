"""Layer 2b, batch plans: fairseq's bucketing arithmetic, the batching spec, the pair, block and mixture plan
builders and their memory-mapped cache.

Imports the format layer only; never torch (the training layer's samplers walk these plans).
"""
