"""nvcc_plan's logic without nvcc: the dryrun taken apart into front, per-arch chains and back; the flags the pool
owns taken out; the depfile parts merged; the core pool bounding and ordering its waiters."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from builder.steps.compilation import Parallelism
from builder.steps.nvcc_time import seed_costs, unit_costs
from builder.steps.programs import nvcc_plan
from builder.steps.programs.objcache import headers_of

DRYRUN = (Path(__file__).parent / "data" / "nvcc_plan" / "dryrun-2arch.txt").read_text()


def test_split_flags_makes_env_flags_explicit_and_drops_threads_and_time() -> None:
    environ = {"NVCC_APPEND_FLAGS": "--threads 8 --time /w/t.csv", "NVCC_PREPEND_FLAGS": "-t=2"}
    flags, time_file = nvcc_plan.split_flags(["-c", "a.cu", "-o", "a.o", "--threads", "4"], environ)
    assert flags == ["-c", "a.cu", "-o", "a.o"]
    assert time_file == "/w/t.csv"


def test_dryrun_splits_into_one_chain_per_virtual_arch() -> None:
    variables, commands = nvcc_plan.parse_dryrun(DRYRUN)
    assert variables["CICC_PATH"].endswith("/nvvm/bin")
    plan = nvcc_plan.plan(variables, commands, depfile="k.o.d", output="k.o")
    assert sorted(plan.chains) == ["compute_80", "compute_90"]
    for arch, chain in plan.chains.items():
        programs = [nvcc_plan.program_of(c) for c in chain]
        assert programs[1:] == ["cicc", "ptxas"], chain  # its own preprocessing first
        assert f"-D__CUDA_ARCH__={arch[-2:]}0" in chain[0]
    assert [nvcc_plan.program_of(c) for c in plan.front] == ["gcc", "cudafe++"]
    assert [nvcc_plan.program_of(c) for c in plan.back] == ["fatbinary", "rm", "gcc"]
    assert " -c " in plan.back[-1] and '-o "k.o"' in plan.back[-1]
    # every preprocessing writes a depfile part, the host's and each arch's: nvcc's depfile is their union
    assert len(plan.depfiles) == 3 and all("-MD -MF k.o.d.part" in c for c in [plan.front[0], *(
        chain[0] for chain in plan.chains.values())])


def test_a_dryrun_without_cicc_is_not_planned() -> None:
    variables, commands = nvcc_plan.parse_dryrun(DRYRUN)
    with pytest.raises(nvcc_plan.NotPlannable):
        nvcc_plan.plan(variables, [c for c in commands if "cicc" not in c], depfile="k.o.d", output="k.o")
    with pytest.raises(nvcc_plan.NotPlannable):
        nvcc_plan.plan(variables, commands, depfile=None, output="k.o")


def test_depfile_parts_merge_into_one_in_first_seen_order(tmp_path: Path) -> None:
    first, second = tmp_path / "d.part0", tmp_path / "d.part1"
    first.write_text("k.o: k.cu \\\n /usr/a.h /usr/b\\ c.h\n")
    second.write_text("k.o: k.cu /usr/a.h \\\n /usr/assert.h\n")
    nvcc_plan.merge_depfiles([str(first), str(second)], str(tmp_path / "d"), "k.o")
    text = (tmp_path / "d").read_text()
    assert [w for w in text.split() if w != "\\"] == ["k.o:", "k.cu", "/usr/a.h", "/usr/b\\", "c.h", "/usr/assert.h"]
    assert headers_of(tmp_path / "d") == ["/usr/a.h", "/usr/assert.h", "/usr/b c.h", "k.cu"]
    assert not first.exists() and not second.exists()


def test_pool_never_runs_more_than_its_slots(tmp_path: Path) -> None:
    pool = nvcc_plan.CorePool(tmp_path / "pool", 2)
    running, peak, lock = [0], [0], threading.Lock()

    def step() -> None:
        with pool.core(1.0):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.1)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=step) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 2


def test_pool_serves_the_longest_waiter_first(tmp_path: Path) -> None:
    pool = nvcc_plan.CorePool(tmp_path / "pool", 1)
    order: list[float] = []
    release = threading.Event()

    def hold() -> None:
        with pool.core(0.0):
            release.wait()

    def step(priority: float) -> None:
        with pool.core(priority):
            order.append(priority)

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.1)
    waiters = [threading.Thread(target=step, args=(p,)) for p in (5.0, 300.0, 40.0)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.3)  # every waiter has its ticket before the core frees up
    release.set()
    for thread in (holder, *waiters):
        thread.join()
    assert order == [300.0, 40.0, 5.0]


@pytest.mark.parametrize("trial", range(3))  # the old pool let the top `slots` waiters race for a core
def test_a_freed_core_goes_to_the_longest_waiter_even_when_others_are_in_line(tmp_path: Path, trial: int) -> None:
    pool = nvcc_plan.CorePool(tmp_path / "pool", 4)
    order: list[float] = []
    releases = [threading.Event() for _ in range(4)]

    def hold(release: threading.Event) -> None:
        with pool.core(0.0):
            release.wait()

    def step(priority: float) -> None:
        with pool.core(priority):
            order.append(priority)

    holders = [threading.Thread(target=hold, args=(release,), daemon=True) for release in releases]
    for holder in holders:
        holder.start()
    time.sleep(0.2)
    waiters = [threading.Thread(target=step, args=(p,), daemon=True) for p in (5.0, 6.0, 7.0, 300.0)]
    try:
        for waiter in waiters:  # the short ones first
            waiter.start()
            time.sleep(0.05)
        time.sleep(0.3)  # all four in line (4 slots) before one core frees up
        releases[0].set()  # one core: it goes to the waiters one after the other, each step ending at once
        for waiter in waiters:
            waiter.join(timeout=5)
        assert order == [300.0, 7.0, 6.0, 5.0]
    finally:
        for release in releases:
            release.set()


def test_a_dead_waiters_ticket_is_ignored(tmp_path: Path) -> None:
    pool = nvcc_plan.CorePool(tmp_path / "pool", 1)
    (tmp_path / "pool" / "waiting").mkdir(parents=True)
    stale = tmp_path / "pool" / "waiting" / f"{0:016.3f}-{0:020d}-999999999-0"  # a pid that cannot exist
    stale.touch()
    with pool.core(1.0):
        pass
    assert not stale.exists()


def test_costs_come_from_measurements_else_from_the_source_size(tmp_path: Path) -> None:
    costs_file = tmp_path / "costs.json"
    costs_file.write_text('{"bwd.cu": {"9.0": 330.0, "8.0": 200.0, "host": 30.0}}')
    environ = {nvcc_plan.COSTS_ENV: str(costs_file)}
    measured = nvcc_plan.Costs.load(environ, "bwd.cu", tmp_path / "bwd.cu")
    assert (measured.arch("compute_90"), measured.arch("compute_100"), measured.host) == (330.0, 330.0, 30.0)
    source = tmp_path / "fwd.cu"
    source.write_bytes(b"x" * 5000)
    assert nvcc_plan.Costs.load(environ, "fwd.cu", source).arch("compute_90") == 5.0


def test_a_guess_for_every_arch_and_a_pattern_of_units_serve_where_nothing_was_measured(tmp_path: Path) -> None:
    costs_file = tmp_path / "costs.json"
    every = nvcc_plan.EVERY_ARCH
    costs_file.write_text(json.dumps({"bwd.cu": {"9.0": 80.0, "host": 10.0}, "scan_bwd_*.cu": {every: 115.0},
                                      "scan_fwd_*.cu": {every: 46.0}}))
    environ = {nvcc_plan.COSTS_ENV: str(costs_file)}
    guessed = nvcc_plan.Costs.load(environ, "scan_bwd_fp16.cu", tmp_path / "scan_bwd_fp16.cu")
    assert (guessed.arch("compute_90"), guessed.arch("compute_75"), guessed.host) == (115.0, 115.0, 0.0)
    assert nvcc_plan.Costs.load(environ, "scan_fwd_fp16.cu", tmp_path / "x.cu").arch("compute_90") == 46.0
    assert nvcc_plan.Costs.load(environ, "bwd.cu", tmp_path / "bwd.cu").arch("compute_90") == 80.0  # its name first


def test_a_first_builds_pool_starts_the_costlier_parts_of_a_split_tu_first() -> None:
    # the recipe's shares of causal-conv1d's backward (tu_split.py: 208, 208, 157 of 573 estimated) times the seed
    shares = {"causal_conv1d_bwd_part1.cu": ("causal_conv1d_bwd.cu", 208 / 573),
              "causal_conv1d_bwd_part2.cu": ("causal_conv1d_bwd.cu", 208 / 573),
              "causal_conv1d_bwd_part3.cu": ("causal_conv1d_bwd.cu", 157 / 573)}
    costs = seed_costs("causal-conv1d", shares)
    every = nvcc_plan.EVERY_ARCH
    whole = costs["causal_conv1d_bwd.cu"][every]
    assert costs["causal_conv1d_bwd_part1.cu"][every] == costs["causal_conv1d_bwd_part2.cu"][every] == round(
        whole * 208 / 573, 3)
    assert costs["causal_conv1d_bwd_part3.cu"][every] < costs["causal_conv1d_bwd_part1.cu"][every]
    assert costs["causal_conv1d_fwd.cu"][every] > costs["causal_conv1d_update.cu"][every]
    assert seed_costs("no-such-package", shares) == {}  # no seed: the pool falls back on the sources' sizes


def test_unit_costs_average_the_ledgers_compile_times() -> None:
    records = ['[{"unit": "a.cu", "arch": "9.0", "seconds": 10}, {"unit": "a.cu", "arch": "host", "seconds": 2}]',
               '[{"unit": "a.cu", "arch": "9.0", "seconds": 20}]', ""]
    assert unit_costs(records) == {"a.cu": {"9.0": 15.0, "host": 2.0}}


def test_parallelism_with_the_pool_sizes_the_pool_to_cores_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(16)))
    monkeypatch.setattr("builder.steps.compilation.available_memory", lambda: 40 * 2**30)
    pooled = Parallelism.fit(9, split=True)
    assert (pooled.pool_slots, pooled.nvcc_threads, pooled.max_jobs) == (11, 1, 44)
    whole = Parallelism.fit(9, split=False)
    assert (whole.pool_slots, whole.nvcc_threads, whole.max_jobs) == (0, 9, 11)


def test_a_failed_step_stops_the_pool_and_nothing_starts_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    def call(command: str, env: dict[str, str], pool: nvcc_plan.CorePool, cpu: list[float] | None = None) -> int:
        ran.append(command)
        return 1 if command == "cicc --fails" else 0

    monkeypatch.setattr(nvcc_plan, "_call", call)
    pool = nvcc_plan.CorePool(tmp_path / "pool", 1)
    timings = nvcc_plan._Timings("k.cu")
    assert nvcc_plan._run_commands(["cicc --fails", "ptxas a"], {}, timings, "compute_90", pool) == 1
    assert pool.stopped
    assert nvcc_plan._run_commands(["cicc b", "ptxas b"], {}, timings, "compute_80", pool) == 1
    assert ran == ["cicc --fails"]


def test_a_stopped_pool_lets_its_waiters_go_at_once(tmp_path: Path) -> None:
    pool = nvcc_plan.CorePool(tmp_path / "pool", 1)
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        with pool.core(0.0):
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    threading.Timer(0.2, pool.stop).start()
    start = time.monotonic()
    with pool.core(1.0):  # the only core is held: without the stop this would wait for the release
        waited = time.monotonic() - start
    release.set()
    holder.join()
    assert 0.1 < waited < 2.0
