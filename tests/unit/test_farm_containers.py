"""The container farm's own logic with a fake engine: which images a plan needs and their tags, the engine's
absence as one error with the fix, what a container is given (mounts, caches, the --only hand-off), what the
ledger says when a container fails, merging wheelhouses, and the cost estimate and shards."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from pathlib import Path

import pytest

from builder.core.errors import PlanError, ToolchainError, WheelwrightError
from builder.core.hashing import sha256_of
from builder.core.ledger import Ledger, LedgerEntry
from builder.core.runner import StepFailed
from builder.core.wheelhouse import Layout
from builder.farm import images
from builder.farm.build import BuildOptions
from builder.farm.container import ContainerBackend, Invocation, group_jobs, inner_script, toolkit_home
from builder.farm.engine import CliEngine, Mount, RunSpec, find_engine, run_arguments
from builder.farm.merge import merge_outputs
from builder.plan.estimate import Item, estimate, ledger_model, makespan, seed_model, timeout_minutes
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.plan.job import Job
from builder.plan.shards import shard

ROOT = Path(__file__).resolve().parents[2]


def plan(profile: str = "local"):
    return load_plan(ROOT / "matrix.yaml", profile, host="3.11")


# -- the engine ------------------------------------------------------------------------------------------------------


def test_no_engine_is_one_error_naming_the_fix() -> None:
    with pytest.raises(ToolchainError) as raised:
        find_engine(which=lambda name: None)
    assert "no container engine: docker or podman is not installed" in str(raised.value)
    assert "apt-get install docker.io" in raised.value.tip and "dockerd" in raised.value.tip


def test_a_daemon_that_does_not_answer_is_named() -> None:
    with pytest.raises(ToolchainError, match="docker is installed but its daemon does not answer"):
        find_engine(which=lambda name: f"/usr/bin/{name}" if name == "docker" else None, responds=lambda path: False)


def test_podman_serves_where_docker_is_absent() -> None:
    engine = find_engine(which=lambda name: "/usr/bin/podman" if name == "podman" else None, responds=lambda path: True)
    assert isinstance(engine, CliEngine) and engine.name == "podman"


def test_run_arguments_mount_read_only_and_remove_the_container() -> None:
    spec = RunSpec(
        image="img:tag",
        command=("bash", "-c", "true"),
        env={"B": "2", "A": "1"},
        mounts=(Mount(source=Path("/src"), target=Path("/opt/src"), read_only=True),),
    )
    assert run_arguments(spec) == [
        "run",
        "--rm",
        "--init",
        "--mount",
        "type=bind,source=/src,target=/opt/src,readonly",
        "--env",
        "A=1",
        "--env",
        "B=2",
        "img:tag",
        "bash",
        "-c",
        "true",
    ]


# -- images ----------------------------------------------------------------------------------------------------------


def test_the_local_plan_needs_one_buildable_cuda_image() -> None:
    (spec,) = images.images_for(plan().jobs)
    assert (spec.name, spec.base.name, spec.pythons) == ("cuda13.0", "bullseye", ("3.11",))
    assert spec.build_args == {
        "BASE": "wheelwright/base:bullseye",
        "CUDA_VERSION": "13.0",
        "CUDA_HOME": "/usr/local/cuda-13.0",
        "TOOLKIT": "",  # the host's 13.0 is mounted when a job runs: the image carries none
        "PYTHONS": "3.11",
        "RUNNER_PYTHON": "3.11",
        "COMPILER_PACKAGES": "clang-16",
    }
    assert spec.not_buildable() is None
    assert re.fullmatch(r"wheelwright/builder:cuda13\.0-bullseye-[0-9a-f]{12}", spec.tag(images.docker_dir()))


def test_the_release_plan_needs_one_image_per_toolkit_and_rocm_comes_from_manylinux() -> None:
    specs = images.images_for(plan("release").jobs)
    accelerators = {job.accelerator for job in plan("release").jobs}
    assert len(specs) == len(accelerators) == len({s.name for s in specs})
    rocm = [s for s in specs if s.family == "rocm"]
    assert rocm and all(s.base.name == "manylinux_2_28" for s in rocm)
    for spec in rocm:
        # images.toml names no free-threaded interpreter of the builder images yet: the image says what it lacks
        free_threaded = [p for p in spec.pythons if p.endswith("t")]
        reason = f"cannot provide Python {', '.join(free_threaded)}" if free_threaded else "no pinned digest"
        assert reason in (spec.not_buildable() or ""), spec.name
    cuda118 = next(s for s in specs if s.name == "cuda11.8")
    assert "cannot provide Python 3.10, 3.12" in cuda118.not_buildable()


def test_a_pinned_registry_base_is_referenced_by_digest() -> None:
    bases = images.load_bases()
    digest = "sha256:" + "ab" * 32
    pinned = bases["manylinux_2_28"].model_copy(update={"digests": {"cuda13.0": digest}})
    (spec,) = images.images_for(plan().jobs, "manylinux_2_28", {**bases, "manylinux_2_28": pinned})
    assert spec.build_args["BASE"] == f"pytorch/manylinux2_28-builder:cuda13.0@{digest}"
    assert spec.not_buildable() is None


def test_the_tag_changes_with_the_build_args(tmp_path: Path) -> None:
    (spec,) = images.images_for(plan().jobs)
    other = dataclasses.replace(spec, pythons=("3.9", "3.11"))
    assert spec.tag(images.docker_dir()) != other.tag(images.docker_dir())


def test_render_writes_a_self_contained_context(tmp_path: Path) -> None:
    rocm = next(s for s in images.images_for(plan("release").jobs) if s.name == "rocm6.0")
    target = images.render(rocm, tmp_path)
    assert (target / "Dockerfile").read_text() == (ROOT / "docker" / "rocm.Dockerfile").read_text()
    assert (target / "rocm" / "fix-bf16-header.sh").is_file() and (target / "install-python.sh").is_file()
    script = (target / "build.sh").read_text()
    assert "--build-arg ROCM_VERSION='6.0'" in script and "no pinned digest" in script


def test_the_bullseye_base_lists_exactly_the_pythons_install_python_can_build() -> None:
    table = re.search(r"declare -A suite_of=\((.*)\)", (ROOT / "docker" / "install-python.sh").read_text())[1]
    assert tuple(re.findall(r"\[(\d\.\d+)\]", table)) == images.load_bases()["bullseye"].pythons


# -- the container backend -------------------------------------------------------------------------------------------


class FakeEngine:
    name = "fake"

    def __init__(self, *, behave=None) -> None:
        self.runs: list[RunSpec] = []
        self.behave = behave or (lambda spec: None)

    def image_id(self, tag: str) -> str:
        return "sha256:present"

    def run(self, spec: RunSpec, *, log_path=None, on_line=None) -> None:
        self.runs.append(spec)
        self.behave(spec)


@pytest.fixture
def backend_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ContainerBackend, "_prefill_torch", lambda self, group, log_path: None)
    monkeypatch.setattr(ContainerBackend, "_host_toolkit", lambda self, job: Path("/usr/local/cuda-13.0"))
    layout = Layout(root=tmp_path / "out")
    invocation = Invocation(matrix=ROOT / "matrix.yaml", profile="local")
    return layout, invocation


def test_a_container_gets_its_group_the_host_caches_and_the_toolkit(backend_setup, tmp_path: Path) -> None:
    layout, invocation = backend_setup
    engine = FakeEngine()
    ContainerBackend(engine, layout, load_facts(), BuildOptions(), invocation, base="bullseye").run(plan().jobs)
    assert len(engine.runs) == 2  # causal-conv1d and mamba-ssm: one container per (package version, label)
    spec = engine.runs[0]
    mounts = {m.target: m for m in spec.mounts}
    cache = tmp_path / "cache"
    assert mounts[Path("/var/cache/wheelwright/runtime")].source == cache / "runtime"
    assert mounts[Path("/var/cache/wheelwright/sdists")].source == cache / "sdists"
    assert mounts[Path("/var/cache/wheelwright")].source == cache / "containers" / "cuda13.0-bullseye"
    assert mounts[Path("/usr/local/cuda-13.0")].read_only and mounts[layout.root].source == layout.root
    assert spec.env["WHEELWRIGHT_CUDA_HOME"] == "/usr/local/cuda-13.0" and spec.env["WHEELWRIGHT_HOST_PYTHON"]
    assert (spec.env["CC"], spec.env["CXX"]) == ("clang-16", "clang++-16")
    script = spec.command[-1]
    assert "--only causal-conv1d-1.7.0+pt214cu130-cp" in script and "mamba" not in script
    assert "--backend local" in script and "python3.11 -m venv" in script


def test_a_debian_toolkit_is_mounted_with_the_tree_its_links_reach(
    backend_setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "toolkits" / "debian-12.4"
    (home / "root" / "bin").mkdir(parents=True)
    (home / "tree" / "usr" / "include").mkdir(parents=True)
    (home / "root" / "include").symlink_to(Path("..", "tree", "usr", "include"))
    assert toolkit_home(home / "root") == home
    real = tmp_path / "cuda-13.0"
    (real / "targets" / "lib").mkdir(parents=True)
    (real / "lib64").symlink_to(Path("targets", "lib"))
    assert toolkit_home(real) == real  # links that stay inside: the root itself
    (real / "escapes").symlink_to("/etc")
    assert toolkit_home(real) == real  # never the host's / (a link reaching out stays dangling, as before)
    layout, invocation = backend_setup
    monkeypatch.setattr(ContainerBackend, "_host_toolkit", lambda self, job: home / "root")
    engine = FakeEngine()
    ContainerBackend(engine, layout, load_facts(), BuildOptions(), invocation, base="bullseye").run(plan().jobs)
    spec = engine.runs[0]
    assert {m.target: m.source for m in spec.mounts}[Path("/usr/local/cuda-13.0")] == home
    assert spec.env["WHEELWRIGHT_CUDA_HOME"] == "/usr/local/cuda-13.0/root"


def test_a_container_that_fails_records_its_jobs_as_failed(backend_setup) -> None:
    layout, invocation = backend_setup

    def explode(spec: RunSpec) -> None:
        raise StepFailed("run image", ["docker", "run"], 125, None)

    outcomes = ContainerBackend(
        FakeEngine(behave=explode), layout, load_facts(), BuildOptions(), invocation, base="bullseye"
    ).run(plan().jobs)
    assert [o.entry.status for o in outcomes] == ["failed", "failed"]
    assert all(o.entry.phase == "container" and "exit 125" in o.entry.reason for o in outcomes)


def _row(job: Job, status: str, **fields: object) -> LedgerEntry:
    """The ledger row a build of ``job`` leaves."""
    return LedgerEntry(job_id=job.identifier, package=job.package, version=job.version, label=job.label,
                       torch=job.torch, accelerator=job.accelerator.name, python=job.python, input_hash="h",
                       status=status, **fields)


def test_the_inner_builds_ledger_rows_are_the_outcomes(backend_setup) -> None:
    layout, invocation = backend_setup
    jobs = plan().jobs

    def build_inside(spec: RunSpec) -> None:  # what the inner `wheelwright build` leaves: its ledger rows
        with Ledger(layout.ledger) as ledger:
            for job in jobs:
                if job.identifier in spec.command[-1]:
                    ledger.put(_row(job, "built", wheel="w.whl"))
        raise StepFailed("run image", ["docker", "run"], 6, None)  # "some job failed" is the ledger's to say

    outcomes = ContainerBackend(
        FakeEngine(behave=build_inside), layout, load_facts(), BuildOptions(), invocation, base="bullseye"
    ).run(jobs)
    assert [o.entry.status for o in outcomes] == ["built", "built"]


def test_inner_script_passes_the_options_through() -> None:
    jobs = plan().jobs
    (spec,) = images.images_for(jobs[:1])
    script = inner_script(
        jobs[:1],
        spec,
        Invocation(matrix=Path("/m.yaml"), profile="local"),
        Layout(root=Path("/o")),
        BuildOptions(retry_failed=True, objcache="off"),
    )
    assert "--objcache off" in script and "--retry-failed" in script and "--output /o" in script
    assert group_jobs(plan("release").jobs)[0][0].identifier.startswith("causal-conv1d-1.7.0+pt21cu118-cp39")


def test_only_refuses_an_unknown_identifier() -> None:
    with pytest.raises(PlanError, match="--only 'causal-conv1d-9' is not a job of profile 'local'"):
        plan().only(["causal-conv1d-9"])


# -- merge -----------------------------------------------------------------------------------------------------------


def _wheelhouse(root: Path, job, content: bytes, *, status: str = "built") -> Path:
    layout = Layout(root=root)
    layout.dist.mkdir(parents=True)
    wheel = (
        layout.dist / f"{job.dist_name}-{job.local_version}-{job.python_tag}-{job.python_tag}-manylinux_2_28_x86_64.whl"
    )
    wheel.write_bytes(content)
    with Ledger(layout.ledger) as ledger:
        ledger.put(_row(job, status, wheel=wheel.name, wheel_sha256=sha256_of(wheel), wheel_size=len(content)))
    return root


def test_merge_collects_every_wheelhouse_and_refuses_two_builds_of_one_wheel(tmp_path: Path) -> None:
    first, second = plan().jobs
    merged = merge_outputs(
        [_wheelhouse(tmp_path / "a", first, b"one"), _wheelhouse(tmp_path / "b", second, b"two")],
        Layout(root=tmp_path / "all"),
    )
    assert (merged.jobs, merged.wheels) == (2, 2)
    with Ledger(tmp_path / "all" / "ledger.sqlite") as ledger:
        assert {e.job_id for e in ledger.entries()} == {first.identifier, second.identifier}
    with pytest.raises(WheelwrightError, match="comes in two different builds"):
        merge_outputs([_wheelhouse(tmp_path / "c", first, b"other bytes")], Layout(root=tmp_path / "all"))


# -- estimate and shards ---------------------------------------------------------------------------------------------


def test_the_release_plan_costs_at_most_a_quarter_of_upstreams_cpu_hours() -> None:
    ours, upstream = estimate(plan("release").jobs, seed_model(), runners=20, cores=4)
    assert ours.cpu_hours / upstream.cpu_hours <= 0.25
    assert len(ours.items) < len(upstream.items) == len(plan("release").jobs)
    assert ours.extrapolated == ours.costs  # the seed has one figure per unit: every arch is extrapolated


def test_a_single_python_group_costs_the_same_either_way() -> None:
    ours, upstream = estimate(plan().jobs, seed_model(), runners=1, cores=4)
    assert ours.cpu_hours == pytest.approx(upstream.cpu_hours)


def test_measured_unit_costs_in_the_ledger_replace_the_seed(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    times = '[{"unit": "a.cu", "arch": "9.0", "seconds": 100}, {"unit": "a.cu", "arch": "host", "seconds": 5}]'
    with sqlite3.connect(ledger) as db:
        db.execute("CREATE TABLE jobs (job_id, package, accelerator, compile_times)")
        db.execute("INSERT INTO jobs VALUES ('j1', 'causal-conv1d', 'cu130', ?)", (times,))
        db.execute("INSERT INTO jobs VALUES ('j2', 'causal-conv1d', 'cu130', ?)", (times.replace("100", "120"),))
    model = ledger_model(ledger, seed_model())
    job = dataclasses.replace(plan().jobs[0], archs=("9.0", "10.0"))
    assert job.accelerator.name == "cu130"
    costs, extrapolated, total = model.cuda_costs(job)
    assert costs == [(1, [5.0, 110.0, 110.0])] and (extrapolated, total) == (1, 2)
    assert "causal-conv1d cu130" in model.source
    assert model.units["mamba-ssm"] == seed_model().units["mamba-ssm"]


def test_makespan_and_timeouts() -> None:
    assert makespan([5, 4, 3, 2, 1], 2) == 8 and makespan([3, 3], 5) == 3
    assert timeout_minutes(Item(name="x", cpu=1, wall=10 * 3600)) == 340
    assert timeout_minutes(Item(name="x", cpu=1, wall=60)) == 30


def test_shards_never_split_a_group_and_hold_every_job() -> None:
    jobs = plan("release").jobs
    result = shard(jobs, seed_model(), size=7)
    rows = [row for matrix in result["matrices"] for row in matrix["include"]]
    assert all(len(m["include"]) <= 7 for m in result["matrices"])
    assert sorted(j for row in rows for j in row["jobs"].split()) == sorted(j.identifier for j in jobs)
    images_in_order = [(row["platform"], row["image"]) for row in rows]
    assert images_in_order == sorted(images_in_order, key=lambda p: (p[0] != "x86_64", p[1].startswith("rocm"), p[1]))


def test_the_container_reaches_registries_as_the_host_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.farm.container import HOST_CA, host_network

    bundle = tmp_path / "ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("WHEELWRIGHT_TORCH_INDEX", "https://mirror.example/whl/{accelerator}/")  # a setting, by value
    mounts, env = host_network({"PIP_CERT": str(bundle), "HTTPS_PROXY": "http://proxy:3128", "HOME": "/root"})
    assert mounts == [Mount(source=bundle, target=HOST_CA, read_only=True)]
    assert env == {
        "WHEELWRIGHT_TORCH_INDEX": "https://mirror.example/whl/{accelerator}/",
        "HTTPS_PROXY": "http://proxy:3128",
        "PIP_CERT": str(HOST_CA),
        "SSL_CERT_FILE": str(HOST_CA),
        "REQUESTS_CA_BUNDLE": str(HOST_CA),
    }


def test_the_container_shares_the_farms_cache_with_its_credentials_off_the_command_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.farm.container import SHARED_CACHE_SETTINGS, shared_cache_env

    for name in SHARED_CACHE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WHEELWRIGHT_OBJCACHE_REMOTE", "s3://farm/objects")
    host = {"WHEELWRIGHT_OBJCACHE_REMOTE": "s3://farm/objects", "GITHUB_ACTIONS": "true",
            "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_NAME": "push", "AWS_ACCESS_KEY_ID": "AKIA",
            "AWS_SECRET_ACCESS_KEY": "secret", "HOME": "/root"}
    env, inherit = shared_cache_env(host)
    assert env == {key: host[key] for key in ("WHEELWRIGHT_OBJCACHE_REMOTE", "GITHUB_ACTIONS", "GITHUB_REF",
                                              "GITHUB_EVENT_NAME")}
    assert inherit == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    arguments = run_arguments(RunSpec(image="img", command=("true",), env=env, inherit=inherit))
    assert "secret" not in " ".join(arguments) and arguments.count("--env") == 6
    assert arguments[arguments.index("AWS_ACCESS_KEY_ID") - 1] == "--env"
    monkeypatch.delenv("WHEELWRIGHT_OBJCACHE_REMOTE")
    assert shared_cache_env(host) == ({}, ())


def test_a_job_whose_image_cannot_be_built_here_is_unbuildable_with_the_reason(backend_setup) -> None:
    layout, invocation = backend_setup
    jobs = [j for j in plan("release").jobs if j.accelerator.name == "rocm6.0"][:1]
    engine = FakeEngine()
    (outcome,) = ContainerBackend(engine, layout, load_facts(), BuildOptions(), invocation, base="bullseye").run(jobs)
    assert outcome.entry.status == "unbuildable" and "no pinned digest" in outcome.entry.reason
    assert engine.runs == []
