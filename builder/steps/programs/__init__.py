"""Programs that run in a job's build environment, not in wheelwright's process: objcache.py (torch's PYTORCH_NVCC
wrapper: deterministic nvcc, the object cache), nvcc_plan.py (nvcc split over the core pool, imported beside it) and
cross_cc.py (the cross compiler's wrapper). Run by path with the job's Python, where wheelwright is not importable:
standard library only, and no module of wheelwright but each other (pyproject.toml's import contract fences them)."""
