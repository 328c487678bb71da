"""wheelwright: build, repair, verify and index PyTorch CUDA/ROCm extension wheels from one matrix."""

__version__ = "0.1.0"
