"""Layer 1, the on-disk format: schema, metadata, manifest, reader, writer, vocabulary, verify, atomic files.

Imports nothing from the layers above it (conversion, training, integrations) and never imports torch.
"""
