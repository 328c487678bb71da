"""The GPU acceptance checks as tests of the installed wheels, run on the GPU machine by scripts/gpu/acceptance.py
(one stage's tests a pytest run, in the venv the wheels are installed into); without a CUDA device they skip."""
