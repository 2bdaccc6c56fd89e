"""Schema of the scenario's `server:` block: the server a run launches when no --base-url or
--server is given (the command line wins over the file).

    server:
      kind: vllm                 # vllm | sglang | llama.cpp | sim | command
      model_path: /models/x      # the model (a real server has no default)
      python: /opt/vllm/bin/python  # optional: the Python with vLLM / SGLang installed
      bin: /usr/local/bin/llama-server  # optional: the server's executable
      boot_timeout_s: 1200       # optional; default per kind and build (vLLM GPU: 900)
      args: [--max-model-len, "8192"]
      env: {VLLM_CPU_KVCACHE_SPACE: "2"}
      command: [my-server, --port, "{port}", --budget, "{max_num_batched_tokens}"]  # kind: command
      served_name: my-model      # kind: command: the model id the server lists

A command template's `{port}`, `{model}`, `{served_name}` and `{<swept flag>}` are substituted
per boot; swept flags the template does not name are appended as `--flag-name value`.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.scenario.checks import TEXT, Checker, choice, number, show
from loadgen.scenario.marked_yaml import MarkedMap
from loadgen.scenario.model import SERVER_BLOCK_KINDS, ServerConfig

SERVER_KEYS = (
    "kind", "model_path", "args", "env", "command", "served_name", "python", "bin",
    "boot_timeout_s",
)  # fmt: skip


def _strings(c: Checker, m: MarkedMap, key: str) -> tuple[str, ...]:
    items = c.sequence(m, key, "server")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            c.add(items.item_locs[i], f"server.{key}[{i}]", f"got {show(item)} (expected a string)")
            continue
        out.append(str(item))
    return tuple(out)


def server(c: Checker, root: MarkedMap, base_dir: Path) -> ServerConfig | None:
    m = c.mapping(root, "server", "")
    c.keys(m, "server", SERVER_KEYS)
    kind = c.field(m, "kind", "server", choice(SERVER_BLOCK_KINDS))
    model = c.field(m, "model_path", "server", TEXT, None)
    env_map = c.mapping(m, "env", "server")
    env = []
    for key, value in env_map.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            c.at_value(env_map, key, "server.env", f"got {show(value)} (expected a string)")
            continue
        env.append((str(key), str(value)))
    command = _strings(c, m, "command")
    if kind == "command" and not command:
        c.add(m.loc, "server.command", "missing (kind: command needs a command template)")
    if kind != "command" and command:
        c.at_key(m, "command", "server", "only applies to kind: command (remove it)")
    served = c.field(m, "served_name", "server", TEXT, None)
    python = c.field(m, "python", "server", TEXT, None)
    bin_ = c.field(m, "bin", "server", TEXT, None)
    timeout = c.field(m, "boot_timeout_s", "server", number(gt=0), None)
    if kind is None:
        return None
    return ServerConfig(
        kind, _path(base_dir, model), _strings(c, m, "args"), tuple(env), command, served,
        _path(base_dir, python), _path(base_dir, bin_), timeout,
    )  # fmt: skip


def _path(base_dir: Path, text: str | None) -> Path | None:
    """A path of the block, relative to the scenario file's folder."""
    return None if text is None else base_dir / Path(text).expanduser()
