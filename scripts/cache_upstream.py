"""Put an upstream release commit's archive into wheelwright's source cache from a local git clone, for machines
that reach the package registries but not the forge. Prints the tree digest matrix.yaml pins for the paths.

    python -m scripts.cache_upstream CLONE OWNER/NAME COMMIT PATH...
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from builder.plan.job import UpstreamFiles
from builder.steps.fetch import cache_dir_for_sdists, unpack_sdist
from builder.steps.upstream import archive_name, tree_digest


def main(clone: str, repo: str, commit: str, *paths: str) -> int:
    upstream = UpstreamFiles(repo=repo, commit=commit, paths=paths, tree_digest="0" * 64)
    target = cache_dir_for_sdists() / archive_name(upstream)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f"{repo.split('/')[1]}-{commit}/"
    # the forge's archives name their top directory <name>-<commit>/ too
    subprocess.run(
        ["git", "-C", clone, "archive", "--format=tar.gz", f"--prefix={prefix}", "-o", str(target), commit], check=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        print(target, tree_digest(unpack_sdist(target, Path(tmp)), paths))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
