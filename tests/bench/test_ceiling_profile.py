"""bench/ceiling.py --profile: py-spy's stacks summed per process role over loadgen's client
stage alone (not the command's start, prompts or analysis, nor a thread's wait on a pipe)."""

from __future__ import annotations

PARENT = 'process 7:"/v/bin/python -m loadgen request --workers 2"'
RUN = "<module> (loadgen/__main__.py:3);execute_work (loadgen/commands/run.py:181)"
READER = "Thread.run (threading.py:982);ProcessPool._next (loadgen/client/pool.py:545)"


def _worker(pid: int) -> str:
    # A spawned worker's stacks come behind its parent's label; its command line holds a `;`.
    return (
        f'{PARENT};process {pid}:"/v/bin/python -B -c from multiprocessing.spawn import '
        f'spawn_main; spawn_main(tracker_fd=24, pipe_handle={pid}) --multiprocessing-fork";'
        "<module> (<string>:1);spawn_main (multiprocessing/spawn.py:122)"
    )


RAW = "\n".join(
    [
        f"{PARENT};{RUN};run_arm (loadgen/engine/run.py:300);ProcessPool.run "
        "(loadgen/client/pool.py:500) 10",
        f"{PARENT};{READER};ProcessPool._take (loadgen/client/pool.py:560);"
        "JsonlAppender.write_lines (loadgen/records.py:193) 30",
        # Not counted: the reader waiting, the prompts before the traffic, the analysis after
        # it and an import of the client stage.
        f"{PARENT};{READER};EpollSelector.select (selectors.py:468) 70",
        f"{PARENT};{RUN};materialize (loadgen/engine/materialize.py:22) 40",
        f"{PARENT};<module> (loadgen/__main__.py:3);request_report "
        "(loadgen/report/request_tables.py:54);canonical (loadgen/analysis/stats.py:96) 50",
        f"{PARENT};<module> (loadgen/__main__.py:3);_find_and_load "
        "(<frozen importlib._bootstrap>:1176);<module> (loadgen/client/pool.py:1) 9",
        f"{_worker(11)};_worker_main (loadgen/client/pool.py:364);Runner.run "
        "(asyncio/runners.py:118) 40",
        f"{_worker(11)};_worker_main (loadgen/client/pool.py:364);Runner.run "
        "(asyncio/runners.py:118);Conn.begin (loadgen/client/rawhttp.py:244) 20",
        # Another line of one function: summed as one.
        f"{_worker(12)};_worker_main (loadgen/client/pool.py:364);Runner.run "
        "(asyncio/runners.py:118);Conn.begin (loadgen/client/rawhttp.py:227) 10",
        f"{_worker(12)};_main (multiprocessing/spawn.py:132);_find_and_load "
        "(<frozen importlib._bootstrap>:1176);<module> (loadgen/client/pool.py:1) 25",
        f'{PARENT};process 9:"/v/bin/python -B -c from multiprocessing.resource_tracker '
        'import main;main(5)";<module> (<string>:1);main '
        "(multiprocessing/resource_tracker.py:200) 5",
        "not a stack line",
    ]
)


def test_each_roles_client_stage_is_summed_by_function(ceiling) -> None:
    assert ceiling.stack_summary(RAW, 100).splitlines() == [
        "command (1 process(es)): 0.40 s of CPU in the client stage; own time:",
        "   75.0%  JsonlAppender.write_lines (loadgen/records.py)",
        "   25.0%  ProcessPool.run (loadgen/client/pool.py)",
        "  loadgen's functions with their callees:",
        "   75.0%  ProcessPool._next (loadgen/client/pool.py)",
        "   75.0%  ProcessPool._take (loadgen/client/pool.py)",
        "   75.0%  JsonlAppender.write_lines (loadgen/records.py)",
        "   25.0%  <module> (loadgen/__main__.py)",
        "   25.0%  execute_work (loadgen/commands/run.py)",
        "   25.0%  run_arm (loadgen/engine/run.py)",
        "   25.0%  ProcessPool.run (loadgen/client/pool.py)",
        "workers (2 process(es)): 0.70 s of CPU in the client stage; own time:",
        "   57.1%  Runner.run (asyncio/runners.py)",
        "   42.9%  Conn.begin (loadgen/client/rawhttp.py)",
        "  loadgen's functions with their callees:",
        "  100.0%  _worker_main (loadgen/client/pool.py)",
        "   42.9%  Conn.begin (loadgen/client/rawhttp.py)",
    ]


def test_stacks_outside_the_client_stage_say_so(ceiling) -> None:
    outside = [line for line in RAW.splitlines() if "selectors" in line or "importlib" in line]
    assert ceiling.stack_summary("\n".join(outside), 100) == (
        "profile: no sample in the client stage"
    )
