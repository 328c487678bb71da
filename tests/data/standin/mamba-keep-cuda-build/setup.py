"""OUR STAND-IN, written for wheelwright's tests; not upstream code. It mimics only the documented shape of
mamba-ssm's main-branch setup.py after upstream #977 ("Make CUDA selective scan install explicit opt-in"): the CUDA
extension is declared only when MAMBA_KEEP_CUDA_BUILD=TRUE. Around that it has the least the recipe checks for in
any mamba-ssm setup.py: the variables the recipe sets, a hardcoded -gencode flag, C++17, one setup() call given
version, ext_modules and install_requires, and the version read from mamba_ssm/__init__.py plus
MAMBA_LOCAL_VERSION."""

import ast
import os
import re

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

FORCE_BUILD = os.getenv("MAMBA_FORCE_BUILD", "FALSE") == "TRUE"
KEEP_CUDA_BUILD = os.getenv("MAMBA_KEEP_CUDA_BUILD", "FALSE") == "TRUE"
FORCE_CXX11_ABI = os.getenv("MAMBA_FORCE_CXX11_ABI", "FALSE") == "TRUE"

ext_modules = []
if KEEP_CUDA_BUILD:
    ext_modules.append(
        CUDAExtension(
            name="selective_scan_cuda",
            sources=["csrc/selective_scan/selective_scan.cpp"],
            extra_compile_args={
                "cxx": ["-O3", "-std=c++17"],
                "nvcc": ["-O3", "-std=c++17", "-gencode", "arch=compute_80,code=sm_80"],
            },
            include_dirs=[],
        )
    )


def package_version():
    with open(os.path.join("mamba_ssm", "__init__.py")) as handle:
        public = ast.literal_eval(re.search(r"^__version__\s*=\s*(.*)$", handle.read(), re.MULTILINE).group(1))
    local = os.environ.get("MAMBA_LOCAL_VERSION")
    return f"{public}+{local}" if local else str(public)


setup(
    name="mamba_ssm",
    version=package_version(),
    ext_modules=ext_modules,
    cmdclass={"build_ext": BuildExtension} if ext_modules else {},
    install_requires=["torch", "einops"],
)
