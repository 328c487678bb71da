"""The repository's scripts, importable as one package from the checkout's root (``python -m scripts.gpu_acceptance``),
so that they use the product's own modules (builder.core: errors, hashing, atomic writes) without path edits."""
