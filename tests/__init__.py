"""The test suites (docs/development.md#tests): unit/ (fast, no network, no compiler, subprocesses refused),
integration/ (the real thing on loopback: pip, uv, nvcc, S3, Docker, Chromium; slow/docker/nvcc marked), gpu/ (the
installed wheels on the GPU machine). The helpers at this level are shared by unit and integration."""
