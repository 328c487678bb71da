"""One module per stage of a job, run in wheelwright's own process: fetch, environment, toolchain, recipes, compile,
repair, verify, provenance, variant twins. Imports plan and core only. programs/ holds what runs in the job's
environment instead (by path, standard library only); recipes/prelude.py is pasted into an upstream setup.py."""
