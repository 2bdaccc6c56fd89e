"""The scale-out recipes (deploy/k8s/loadgen-job.yaml, README's "Beyond one box") name loadgen
as it is: the manifest parses as a Job running `loadgen`, and every option the recipes give is
one `loadgen SUBCOMMAND --help` offers."""

from __future__ import annotations

import re
import shlex

import yaml
from click.testing import CliRunner

from loadgen.cli import main

from support.paths import REPO


def unknown_options(argv: list[str]) -> list[str]:
    """The options in `argv` (a loadgen command line, subcommand first) that its --help lacks,
    or ["no such subcommand"]."""
    result = CliRunner().invoke(main, [argv[0], "--help"])
    if result.exit_code != 0:
        return ["no such subcommand"]
    offered = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", result.output))
    return [a for a in argv[1:] if a.startswith("-") and a.split("=")[0] not in offered]


def readme_commands() -> list[list[str]]:
    """The loadgen command lines in README's "Beyond one box" code blocks, subcommand first."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Beyond one box", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if "loadgen" in argv:
                out.append(argv[argv.index("loadgen") + 1 :])
    return out


def test_the_k8s_manifest_is_a_job_that_runs_loadgen_with_options_it_has() -> None:
    job = yaml.safe_load((REPO / "deploy/k8s/loadgen-job.yaml").read_text())
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["command"] == ["loadgen"]
    assert container["args"][0] == "request"
    assert unknown_options(container["args"]) == []
    assert container["resources"]["requests"] == container["resources"]["limits"]


def test_the_readme_recipes_run_loadgen_with_options_it_has() -> None:
    commands = readme_commands()
    assert [c[0] for c in commands] == ["request"]  # the Ray job's driver
    for argv in commands:
        assert "--ray" in argv
        assert unknown_options(argv) == [], argv


def test_an_option_or_subcommand_loadgen_lacks_is_named() -> None:
    assert unknown_options(["request", "--base-url", "u", "--replicas", "2"]) == ["--replicas"]
    assert unknown_options(["no-such-command", "--x"]) == ["no such subcommand"]
