"""Whether this interpreter's torch sees a CUDA device, and the facts about the GPU stack for the report."""

from __future__ import annotations

NO_DEVICE = "no CUDA device"


def unavailable_reason() -> str | None:
    """None when torch sees a CUDA device; otherwise why not, starting with "no CUDA device"."""
    try:
        import torch
    except Exception as error:  # noqa: BLE001 (ImportError, or a torch whose own imports break)
        return f"{NO_DEVICE} (torch cannot be imported by this interpreter: {error})"
    if not torch.cuda.is_available():
        return f"{NO_DEVICE} (torch {torch.__version__} sees none: torch.cuda.is_available() is False)"
    return None


def torch_facts() -> dict[str, object]:
    """torch's version, CUDA and C++ ABI, and the device it runs on (no device fields without one)."""
    try:
        import torch
    except Exception as error:  # noqa: BLE001
        return {"torch": None, "torch_error": str(error)}
    facts: dict[str, object] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "torch_path": torch.__file__,
        "cuda_available": torch.cuda.is_available(),
    }
    if facts["cuda_available"]:
        major, minor = torch.cuda.get_device_capability(0)
        facts.update(device=torch.cuda.get_device_name(0), capability=f"{major}.{minor}",
                     device_count=torch.cuda.device_count())
    return facts
