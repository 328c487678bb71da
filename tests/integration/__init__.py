"""Integration tests: real pip/uv, nvcc, S3 API, Docker and Chromium on loopback; minutes-long ones marked slow."""
