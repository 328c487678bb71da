# A wheelwright builder image for one ROCm release, on PyTorch's manylinux_2_28 ROCm builder (ROCm under /opt/rocm,
# CPython under /opt/python). Rendered and linted here; built only where that registry is reachable.
# Build args (`wheelwright images render` prints the exact ones a plan needs):
#   BASE          pytorch/manylinux2_28-builder:rocmX.Y@sha256:... (a pinned digest, never a moving tag)
#   ROCM_VERSION  the ROCm release, e.g. 6.0 or 6.2.4
#   PYTHONS       the CPython minors the plan's jobs of this ROCm release need, space separated
#   RUNNER_PYTHON the CPython wheelwright itself runs on inside the container
ARG BASE=pytorch/manylinux2_28-builder:rocm6.0
FROM ${BASE}

ARG ROCM_VERSION=6.0
ARG PYTHONS="3.11"
ARG RUNNER_PYTHON=3.13

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY install-python.sh /opt/wheelwright/install-python.sh
COPY rocm/fix-bf16-header.sh /opt/wheelwright/fix-bf16-header.sh

# ROCm 6.0's amd_hip_bf16.h defines its conversion functions in the header without `inline`, so two translation
# units that include it fail to link; mamba-ssm's README documents patching it for ROCm 6.0 only (later releases
# fixed the header, and the script refuses to run where there is nothing to fix).
RUN /opt/wheelwright/install-python.sh ${RUNNER_PYTHON} ${PYTHONS} \
    && if [[ "${ROCM_VERSION}" == 6.0* ]]; then \
         /opt/wheelwright/fix-bf16-header.sh /opt/rocm/include/hip/amd_detail/amd_hip_bf16.h; \
       fi

ENV ROCM_HOME=/opt/rocm \
    PATH=/opt/rocm/bin:${PATH}
LABEL org.wheelwright.toolkit="rocm ${ROCM_VERSION}" org.wheelwright.pythons="${PYTHONS}"
