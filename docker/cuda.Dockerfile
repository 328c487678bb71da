# A wheelwright builder image for one CUDA toolkit: the base's glibc decides the wheel's manylinux tag.
# Build args (`wheelwright images render` prints the exact ones a plan needs):
#   BASE          pytorch/manylinux2_28-builder:cudaX.Y@sha256:... where a registry is reachable, else the locally
#                 bootstrapped Debian bullseye (glibc 2.31) imported as wheelwright/base:bullseye
#   CUDA_VERSION  torch's CUDA; the manylinux builder ships its toolkit under /usr/local/cuda-X.Y; on the local
#                 base the image carries a toolkit that serves it (TOOLKIT), else the host's is mounted there
#                 read-only at run time
#   CUDA_HOME     where the image's toolkit is: /usr/local/cuda-X.Y, X.Y the release of the toolkit itself
#   TOOLKIT       the toolkit the image carries, as its toolkits.toml source pins it ("" for none): the build
#                 context's toolkit/ folder, the host's unpacked tree, copied to /opt/wheelwright/toolkit and its
#                 root/ linked at CUDA_HOME
#   PYTHONS       the CPython minors the plan's jobs of this toolkit need, space separated
#   RUNNER_PYTHON the CPython wheelwright itself runs on inside the container
#   COMPILER_PACKAGES  Debian packages of a newer C++ compiler where the base's is too old ("" for none)
ARG BASE=wheelwright/base:bullseye
FROM ${BASE}

ARG PYTHONS="3.11"
ARG RUNNER_PYTHON=3.11

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The compiler (the base's own: gcc 10 on bullseye, gcc-toolset on manylinux_2_28), patchelf for auditwheel, and
# the headers CPython's build needs. Debian's stable point releases are the pin: apt versions are not pinned here.
# hadolint ignore=DL3008
RUN if command -v apt-get >/dev/null; then \
      apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           ca-certificates g++ gcc make patchelf pkg-config xz-utils libbz2-dev libffi-dev liblzma-dev libncursesw5-dev \
           libreadline-dev libsqlite3-dev libssl-dev uuid-dev zlib1g-dev \
      && rm -rf /var/lib/apt/lists/*; \
    fi

# Interpreters at manylinux's paths (/opt/python/cpXY-cpXY), built from Debian's source package where the base
# does not ship them (see install-python.sh for where each version comes from). wheelwright itself runs on
# RUNNER_PYTHON, best one of PYTHONS (each is a CPython build from source, minutes of the image's build time).
COPY install-python.sh /opt/wheelwright/install-python.sh
RUN /opt/wheelwright/install-python.sh ${RUNNER_PYTHON} ${PYTHONS}

# A C++20 compiler where the base's own is older: torch >= 2.14's headers demand a full C++20 (__cplusplus >=
# 202002L), which bullseye's gcc 10 does not claim; bullseye's clang-16 does, with gcc 10's libstdc++ (so the
# wheel's GLIBCXX needs stay bullseye's). The container backend points CC/CXX at it (builder/data/images.toml).
# Declared after the interpreter layer so that layer stays cached when the compiler changes.
ARG COMPILER_PACKAGES=""
# hadolint ignore=DL3008,SC2086
RUN if [ -n "${COMPILER_PACKAGES}" ] && command -v apt-get >/dev/null; then \
      apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${COMPILER_PACKAGES} \
      && rm -rf /var/lib/apt/lists/*; \
    fi

# The toolkit, last, and CUDA_VERSION declared only here (every RUN after an ARG sees it, so an earlier one would
# make each CUDA version rebuild the interpreters): the images of one base and one set of Pythons share every layer
# above. The folder is empty where the image carries no toolkit (the base's own, or the host's mounted at run
# time). A job finds it by what its nvcc reports (toolkits.toml's host sources look in /usr/local/cuda-*).
ARG CUDA_VERSION=13.0
ARG CUDA_HOME=/usr/local/cuda-${CUDA_VERSION}
ARG TOOLKIT=""
COPY toolkit/ /opt/wheelwright/toolkit/
RUN if [ -n "${TOOLKIT}" ]; then ln -s /opt/wheelwright/toolkit/root "${CUDA_HOME}" && "${CUDA_HOME}/bin/nvcc" --version; fi

ENV CUDA_HOME=${CUDA_HOME} \
    PATH=${CUDA_HOME}/bin:${PATH}
LABEL org.wheelwright.toolkit="cuda ${CUDA_VERSION}" org.wheelwright.carries="${TOOLKIT}" \
      org.wheelwright.pythons="${PYTHONS}" org.wheelwright.runner="${RUNNER_PYTHON}"
