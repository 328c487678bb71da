"""The Python part of the GPU acceptance run (scripts/gpu_acceptance.py is its command line): the summary it keeps,
and the checks on a CUDA device of the wheels pip installed from wheelwright's index."""
