"""The arch wheels' stages (issue #13): arch_build collects the three more causal-conv1d wheels of the label (fat,
PTX-only, without the GPU's arch; and the compute_90 PTX control) that the build stage started; each arch stage
installs its wheel from its own index into its own venv, runs both doctors, then its tests/gpu tests; ptx_speed
times the PTX wheels against the SASS reference."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from builder.core.wheelhouse import Layout
from scripts.gpu import builds, detach
from scripts.gpu.box import Box, StageFailed, free_port
from scripts.gpu.slim_stage import slim_stage
from scripts.gpu.stages import TESTS, run_doctors, start_arch_build, suite_options, variants, wait_detached
from scripts.gpu.summary import PENDING, RUNNING, StageResult, of_checks


def arch_build(box: Box) -> StageResult:
    """Collects the arch builds (starting those this run's build stage did not: --skip-build, --stages), waiting
    until 30 s before the deadline; each wheel with its archs and its compile profile, the main build's beside."""
    for name in variants(box):
        if detach.status(box.arch(name) / "build-run").state not in (detach.RUNNING, detach.FINISHED,
                                                                      detach.COLLECTED):
            start_arch_build(box, name)
    for name in variants(box):
        wait_detached(box, box.arch(name) / "build-run", box.arch(name) / "build-console.log")
    cores = len(os.sched_getaffinity(0))
    checks = [builds.arch_build_check(box.arch(name), name, box.data, cores=cores) for name in variants(box)]
    running = [f"{c['name']}: {c['detail']}" for c in checks if c["status"] == RUNNING]
    if running:
        return StageResult(status=RUNNING, detail="; ".join(running) + "; --resume collects them")
    data = {c["name"].split()[0]: c["data"] for c in checks if c.get("data")}
    data["main"] = {"compile_profile": builds.main_profile(box.wheelhouse, box.data, cores=cores)}
    if data["main"]["compile_profile"]:
        box.console.say(f"  the reference build's {box.data.arch.package} ({box.wheelhouse}): "
                        f"{builds.describe(data['main']['compile_profile'])}")
    return of_checks(checks, data=data)


@contextmanager
def installed_variant(box: Box, name: str) -> Iterator[tuple[Path, str]]:
    """The variant's own site, served on its own port while in the block; its own clean venv, with its wheel
    installed from there: (that venv's python, the site's URL)."""
    folder, port = box.arch(name), free_port()
    url = f"http://127.0.0.1:{port}"
    box.must(box.ww("index", "--output", folder, "--base-url", url))
    with box.serving(Layout(root=folder).site, port, folder / "serve.log"):
        python = box.make_venv(box.work / f"venv-{name}")
        box.pip_install(python, "--find-links", f"{url}/whl/{box.data.label}.html", box.data.arch.package,
                        report=folder / "pip-report.json")
        yield python, url


def arch_stage(name: str) -> Callable[[Box], StageResult]:
    """Install from its own index, doctor's verdict, then the whole upstream suite (after the kernels' first calls
    fill the JIT cache) or the one kernel call that must fail: the two together are the proof."""

    def stage(box: Box) -> StageResult:
        waiting = builds.not_ready(box, name)
        if waiting is not None:
            return waiting
        folder, suite = box.arch(name), box.data.variant(name).suite
        with installed_variant(box, name) as (python, url):
            run_doctors(box, python, url, folder / "doctor.json", folder / "doctor-cli.json")
            tests = TESTS["arch"] + TESTS["arch_suite" if suite else "arch_kernel_call"]
            result, _ = box.pytest(
                python, f"arch_{name}", tests, "--variant", name, "--pip-report", folder / "pip-report.json",
                "--index-url", url, "--dist-dir", Layout(root=folder).dist, "--doctor-report", folder / "doctor.json",
                "--doctor-cli-report", folder / "doctor-cli.json",
                *(suite_options(box, folder / "upstream-pytest.log") if suite else ()))
        return replace(result, data={**result.data, "index_url": url, "variant": name})

    return stage


def sass_python(box: Box) -> tuple[Path, Path]:
    """(the SASS reference wheel, the python whose venv holds it): --sass-reference's wheel in a venv of its own,
    else the main venv's (the main wheelhouse's); either must hold SASS for the GPU."""
    try:
        wheel = builds.sass_reference(box.options.sass_reference or box.wheelhouse, box.data)
    except (ValueError, OSError) as error:
        raise StageFailed(f"no SASS reference wheel: {error}") from None
    box.console.say(f"the SASS reference: {wheel}")
    if box.options.sass_reference is None:
        return wheel, box.venv / "bin" / "python"
    python = box.make_venv(box.work / "venv-sass-ref")
    box.pip_install(python, wheel)
    return wheel, python


def ptx_speed(box: Box) -> StageResult:
    """The JIT's cost, then the PTX wheels against the SASS reference once JIT-ed, in interleaved rounds; the ISA
    control (PTX for the GPU's own arch) may be missing: the target is then judged alone."""
    speed = box.data.ptx_speed
    waiting = builds.not_ready(box, speed.target)
    if waiting is not None:
        return waiting
    control = builds.not_ready(box, speed.isa_control)
    if control is not None and control.status == PENDING:  # its build still runs: the verdict waits for it
        return control
    if control is not None:
        box.console.say(f"no {speed.isa_control} wheel: the {speed.target} PTX is judged without its control")
    wheel, reference = sass_python(box)
    arms = {"sass": reference}
    for name in (speed.target, *(() if control else (speed.isa_control,))):
        with installed_variant(box, name) as (python, _):  # its venv afresh: this may be a later command than its build
            arms[name] = python
    return box.pytest(reference, "ptx_speed", TESTS["ptx_speed"], "--ptx-out",
                      box.work / "arch" / "ptx-speed", "--sass-reference", wheel,
                      *(f"--arm={name}={python}" for name, python in arms.items()))[0]


def stages(box: Box) -> dict[str, Callable[[Box], StageResult]]:
    """arch_build, each variant's stage ([arch.variants] names it; the ISA control's is ptx_speed), ptx_speed."""
    found = {v.stage: (slim_stage if v.stage == "arch_slim" else arch_stage)(name)
             for name, v in box.data.arch.variants.items() if v.stage != "ptx_speed"}
    return {"arch_build": arch_build, **found, "ptx_speed": ptx_speed}
