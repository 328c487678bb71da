"""What to build, decided without building: torch facts, the matrix, GPU archs (Arch), jobs and their labels, the
expansion into jobs, shards and the cost estimate. Pure logic over data files: imports builder.core only, runs no
subprocess."""
