"""The acceptance run's stages, one function each (the registry in scripts/data/gpu_acceptance.toml orders them):
each takes the command's Box and returns how it went. The builds run detached; every check on the GPU is a test
of tests/gpu, run by pytest in the test venv (TESTS names each stage's), whose JSON report becomes the stage."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from builder.core.wheelhouse import Layout
from scripts.gpu import bootstrap, builds, detach
from scripts.gpu.box import Box, StageFailed
from scripts.gpu.summary import FAILED, PASSED, RUNNING, StageResult

INSTALL = ("test_install.py::test_installed_from_the_index", "test_install.py::test_seen_by_this_interpreter")
GPU_READ = "test_doctor.py::test_doctor_reads_the_gpu"
TESTS = {  # each stage's tests, as node ids under tests/gpu
    "preflight": ("test_machine.py",),
    "install": INSTALL,
    "doctor": (GPU_READ, "test_doctor.py::test_doctor_says_ok", "test_doctor.py::test_the_two_doctors_agree"),
    "checklist": ("test_checklist.py",),
    "upstream": ("test_upstream.py",),
    "mamba": ("test_mamba.py",),
    "bench": ("test_bench.py",),
    "arch": (*INSTALL, "test_install.py::test_nothing_else_installed", GPU_READ,
             "test_doctor.py::test_doctor_gives_the_variants_verdict"),
    "arch_suite": ("test_arch.py::test_first_calls_of_the_forward_backward_and_update_kernels", "test_upstream.py"),
    "arch_kernel_call": ("test_arch.py::test_the_kernel_call_fails_with_no_kernel_image",),
    "ptx_speed": ("test_ptx_speed.py",),
}


def preflight(box: Box) -> StageResult:
    """What this machine is; the run goes on only with a CUDA device and the toolkit the label needs."""
    result, facts = box.pytest(box.python, "preflight", TESTS["preflight"])
    stage = replace(result, data={**facts, **result.data})
    if result.status == PASSED:
        stage = replace(stage, detail=f"{facts.get('device')}, torch {facts.get('torch')}, nvcc "
                                      f"{facts.get('nvcc_release')}")
    return stage


def carry(box: Box) -> StageResult:
    """The carried wheels installed (scripts/gpu/bootstrap.py did, before this command's Python started), the
    sdists in the fetch cache, and the gpu-box profile planned: two jobs of the label."""
    if not bootstrap.carried(box.options.carry):
        raise StageFailed(f"no wheels in {box.options.carry / 'wheels'}: run scripts/prepare_gpu_carry.sh here first")
    if bootstrap.installed(box.ww_site) != bootstrap.carried(box.options.carry):
        raise StageFailed(f"{box.ww_site} does not hold the carried wheels: scripts/gpu_acceptance.sh installs them")
    sdists = box.work / "cache" / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    for sdist in (box.options.carry / "cache" / "sdists").glob("*.tar.gz"):
        if not (sdists / sdist.name).exists():  # never rewrites a file a build may read
            shutil.copyfile(sdist, sdists / sdist.name)
    if box.run([box.python, "-m", "scripts.gpu.carry", "satisfied"]) != 0:  # the image's own packages stand in
        box.console.say("could not compare the requirements")
    box.must(box.ww("plan", "--profile", "gpu-box", "--format", "json"), stdout=box.work / "plan.json")
    jobs = json.loads((box.work / "plan.json").read_text())["include"]
    detail = (f"{len(bootstrap.carried(box.options.carry))} carried wheels installed; gpu-box plans {len(jobs)} "
              f"jobs: {', '.join(job['id'] for job in jobs)}")
    ok = {job["label"] for job in jobs} == {box.data.label} and len(jobs) == 2
    return StageResult(status=PASSED if ok else FAILED, detail=detail)


def build_command(box: Box) -> list[str | Path]:
    return box.ww("build", "--profile", "gpu-box", "--output", box.wheelhouse, "--parallel", "2", "--objcache", "off")


def arch_build_command(box: Box, name: str) -> tuple[list[str | Path], dict[str, str]]:
    """An arch variant's build: same package, version and label as the main build's causal-conv1d, so into a folder
    of its own and from a build root of its own (one workspace lock per job id would queue them behind each other).
    Niced: the main wheels gate the first command's stages, these only later ones."""
    command = ["nice", "-n", str(box.data.arch.nice), *box.ww(
        "build", "--profile", box.data.variant(name).profile, "--output", box.arch(name), "--parallel",
        str(box.data.arch.build_parallel), "--objcache", "off")]
    return command, box.environ(COLUMNS="160", WHEELWRIGHT_FIXED_ROOT=f"/tmp/wheelwright-build-{name}")


def start_detached(box: Box, state: Path, command: list[str | Path], log: Path, env: dict[str, str]) -> None:
    log.unlink(missing_ok=True)
    started = detach.start(state, list(map(str, command)), log=log, limit_s=box.options.build_limit, env=env)
    box.console.say(f"started detached (pid {started.pid}, stopped after {box.options.build_limit} s): "
                    f"{' '.join(map(str, command))}")


def stop_detached(box: Box, state: Path) -> None:
    before = detach.status(state)
    after = detach.stop(state)
    if before.state == detach.RUNNING:
        box.console.say(f"stopped the detached command (pid {before.pid}): exit {after.exit_code}")


def wait_detached(box: Box, state: Path, log: Path) -> None:
    """Until 30 s before the deadline at most (--detach: not at all), a line every 30 s quoting the log's last."""
    if box.options.detach:
        return

    def tick(progress: detach.Detached) -> None:
        lines = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
        box.console.say(f"  ... still running, {progress.seconds():.0f} s{': ' + lines[-1][:160] if lines else ''}")

    detach.wait(state, seconds=max(0.0, box.remaining() - 30), tick=tick)


def build(box: Box) -> StageResult:
    """wheelwright build --profile gpu-box, detached (it outlives a command that ends first; --resume collects it),
    with the arch builds beside it; then its ledger."""
    if box.options.skip_build:
        box.console.say(f"reusing the build in {box.wheelhouse}")
        return builds.build_report(box.wheelhouse, box.data, exit_code=0, reused=True)
    state, console = box.work / "build-run", box.work / "build-console.log"
    found = detach.status(state).state
    if box.options.resume and found in (detach.RUNNING, detach.FINISHED):
        box.console.say(f"collecting the build an earlier command started ({found})")
    else:
        stop_detached(box, state)  # a fresh run does not share the wheelhouse
        for name in variants(box):
            stop_detached(box, box.arch(name) / "build-run")
            start_arch_build(box, name)
        start_detached(box, state, build_command(box), console, box.environ(COLUMNS="160"))
    wait_detached(box, state, console)
    result = builds.detached_report(box.wheelhouse, state, box.data)
    if result.status != RUNNING and console.is_file():
        box.console.echo(f"--- wheelwright build's output\n{console.read_text(errors='replace')}")
    return result


def variants(box: Box) -> list[str]:
    """The arch variants this run builds and checks (--variants picks some), in the data file's order."""
    return [name for name in box.data.arch.variants if box.options.variants is None or name in box.options.variants]


def start_arch_build(box: Box, name: str) -> None:
    box.arch(name).mkdir(parents=True, exist_ok=True)
    command, env = arch_build_command(box, name)
    start_detached(box, box.arch(name) / "build-run", command, box.arch(name) / "build-console.log", env)


def index(box: Box) -> StageResult:
    box.must(box.ww("index", "--output", box.wheelhouse, "--base-url", box.url))
    page = Layout(root=box.wheelhouse).site / "whl" / f"{box.data.label}.html"
    if not page.is_file():
        raise StageFailed(f"no find-links page whl/{box.data.label}.html in {box.wheelhouse / 'site'}")
    return StageResult(status=PASSED, detail=str(page))


def serve(box: Box) -> StageResult:
    box.serve(Layout(root=box.wheelhouse).site, int(box.url.rsplit(":", 1)[1]), box.work / "serve.log")
    return StageResult(status=PASSED, detail=f"{box.url}/whl/{box.data.label}.html answers")


def _installed(box: Box, python: Path, url: str, dist: Path, report: Path, tests: tuple[str, ...],
               *extra: str) -> StageResult:
    box.pip_install(python, "--find-links", f"{url}/whl/{box.data.label}.html", *extra, report=report)
    result, _ = box.pytest(python, "install", tests, "--pip-report", report, "--index-url", url, "--dist-dir", dist,
                           "--packages", ",".join(box.packages))
    return result


def install(box: Box) -> StageResult:
    """A venv that sees the machine's torch; pip installs our wheels from the served page, nothing else."""
    python = box.make_venv(box.venv)
    dist = Layout(root=box.wheelhouse).dist
    return _installed(box, python, box.url, dist, box.work / "pip-report.json", TESTS["install"], *box.packages)


def run_doctors(box: Box, python: Path, url: str, out: Path, cli_out: Path) -> None:
    """The site's standalone doctor.py piped into the venv's python, as `curl -s URL/doctor.py | python -` runs it,
    and wheelwright's own subcommand on the same venv; their verdicts are the tests'."""
    script = cli_out.with_name("doctor.py")  # beside the CLI's report, in the work folder
    box.download(f"{url}/doctor.py", script)
    env = {key: value for key, value in box.environ().items() if key != "PYTHONPATH"}
    box.run([python, "-", "--json"], env=env, stdin=script, stdout=out)
    box.run(box.ww("doctor", "--python", python, "--index-url", url, "--json"), stdout=cli_out)


def doctor(box: Box) -> StageResult:
    out, cli_out = box.options.outdir / "doctor.json", box.work / "doctor-cli.json"
    run_doctors(box, box.venv / "bin" / "python", box.url, out, cli_out)
    return box.pytest(box.venv / "bin" / "python", "doctor", TESTS["doctor"], "--doctor-report", out,
                      "--doctor-cli-report", cli_out, "--packages", ",".join(box.packages))[0]


def in_venv(name: str, *options: str) -> Callable[[Box], StageResult]:
    """A stage that is its tests, run in the test venv."""

    def stage(box: Box) -> StageResult:
        return box.pytest(box.venv / "bin" / "python", name, TESTS[name], *options)[0]

    return stage


def checklist(box: Box) -> StageResult:
    leak = ("--leak-seconds", str(box.options.leak_seconds)) if box.options.leak_seconds else ()
    return in_venv("checklist", *leak)(box)


def suite_options(box: Box, log: Path) -> list[str]:
    """For causal-conv1d's suite: started only with [stage_seconds] left, it gets what is left but 20 s."""
    return ["--sdist-dir", str(box.work / "cache" / "sdists"), "--workers", str(box.options.workers),
            "--suite-timeout", str(max(60, int(box.remaining()) - 20)), "--suite-log", str(log),
            *(["--quick"] if box.options.quick else [])]


def upstream(box: Box) -> StageResult:
    return in_venv("upstream", *suite_options(box, box.options.outdir / "upstream-pytest.log"))(box)


STAGES: dict[str, Callable[[Box], StageResult]] = {
    "preflight": preflight, "carry": carry, "build": build, "index": index, "serve": serve, "install": install,
    "doctor": doctor, "checklist": checklist, "upstream": upstream, "mamba": in_venv("mamba"),
    "bench": in_venv("bench"),
}
