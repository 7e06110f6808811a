"""Whether pinned host memory helps: the one check the integrations share (torch sees an accelerator)."""

from __future__ import annotations

import torch

PIN_WARNING = "'pin_memory' argument is set as true but no accelerator is found"  # torch's DataLoader, on a CPU


def has_accelerator() -> bool:
    """Whether torch sees an accelerator (a GPU) that pinned host memory speeds up."""
    accelerator = getattr(torch, "accelerator", None)
    return bool(accelerator.is_available()) if accelerator is not None else torch.cuda.is_available()
