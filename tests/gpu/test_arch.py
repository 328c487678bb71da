"""The arch wheels' own checks on the GPU (issue #13), in the variant's venv after its install and doctor's verdict:
a wheel that must run has each kernel unit's first call timed in one process, which fills the driver's JIT cache
for the suite after it (PTX: the JIT's cost); the wheel without the GPU's arch must fail its first kernel call with
CUDA's "no kernel image is available", as doctor said it would."""

from __future__ import annotations

import pytest

from scripts.gpu.data import AcceptanceData
from tests.gpu.report import Recorded
from tests.gpu.timing import warm_calls

pytestmark = pytest.mark.gpu
NO_KERNEL_IMAGE = "no kernel image is available"


def test_first_calls_of_the_forward_backward_and_update_kernels(acceptance: AcceptanceData, record: Recorded) -> None:
    seconds = warm_calls(acceptance.ptx_speed.first_call.model_dump())
    record.detail = ", ".join(f"{name} {value:.3f} s" for name, value in seconds.items())
    record.data["seconds"] = seconds


def failed_call_problem(error: BaseException | None) -> str | None:
    """What is wrong with how the kernel call ended, for the wheel without a kernel image: None when it raised
    CUDA's no-kernel-image error."""
    if error is None:
        return "the kernel ran: the GPU found code it should lack"
    message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    return None if NO_KERNEL_IMAGE in str(error) else message


def test_the_kernel_call_fails_with_no_kernel_image(record: Recorded) -> None:
    import torch
    from causal_conv1d import causal_conv1d_fn

    x = torch.randn(1, 64, 32, device="cuda")
    weight = torch.randn(64, 4, device="cuda")
    error: BaseException | None = None
    try:
        causal_conv1d_fn(x, weight)
        torch.cuda.synchronize()
    except Exception as raised:  # noqa: BLE001 (the error is the result)
        error = raised
    problem = failed_call_problem(error)
    record.detail = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    record.data["error"] = record.detail
    assert problem is None, problem
