"""bench/ceiling.py names the CPU its table came from: /proc/cpuinfo's model and first clock,
and the threads a core from sysfs, each part left out where the host does not give it."""

from __future__ import annotations

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2100.000

processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2399.998
"""


def test_model_clock_and_threads_a_core(ceiling) -> None:
    assert (ceiling.cpu_description(CPUINFO, "0,8\n")
            == "Intel(R) Xeon(R) Processor, 2,100 MHz, 2 threads a core")  # fmt: skip
    assert (ceiling.cpu_description(CPUINFO, "0-3\n")
            == "Intel(R) Xeon(R) Processor, 2,100 MHz, 4 threads a core")  # fmt: skip
    assert ceiling.cpu_description(CPUINFO, "5\n").endswith(", 1 thread a core")


def test_parts_the_host_does_not_give_are_left_out(ceiling) -> None:
    # An arm host's cpuinfo has no model name nor clock; a container may hide sysfs.
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\n"
    assert ceiling.cpu_description(arm, "0\n") == "1 thread a core"
    assert ceiling.cpu_description(CPUINFO, None) == "Intel(R) Xeon(R) Processor, 2,100 MHz"
    assert ceiling.cpu_description("cpu MHz\t: n/a\n", "0-x") == ""
    assert ceiling.cpu_description("", None) == ""
