"""Layer 3, training: bucketing arithmetic, batch plans and their cache, the sampler, the torch dataset, collation.

Imports the format layer only; the one layer that imports torch.
"""
