"""Where the coordinator is and which token to send: the same sources, in the same order, as
shardctl (cli/shardctl_main.cc ResolveTarget):

  1. the Client's arguments (shardctl: --coordinator, --token);
  2. $SHARDLINE_COORDINATOR and $SHARDLINE_TOKEN;
  3. the config file (default ~/.shardline/config): lines "coordinator=HOST:PORT", "token=...";
  4. the local cluster started by `shardctl cluster up`: <state_dir>/cluster.json
     (state_dir defaults to ".cluster" in the working directory, as shardctl's --state_dir).

Address and token are resolved independently: the first source that names each one wins.
"""
import json
import os
from typing import NamedTuple, Optional

from shardline.errors import NotFoundError


class Target(NamedTuple):
    address: str
    token: str


def _read_config(path: str) -> dict:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                for key in ("coordinator", "token"):
                    if line.startswith(key + "="):
                        out[key] = line[len(key) + 1:].strip()
    except OSError:
        pass
    return out


def _read_cluster(state_dir: str) -> dict:
    try:
        with open(os.path.join(state_dir, "cluster.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    return {"coordinator": info.get("coordinator_address", ""), "token": info.get("token", "")}


def resolve_target(address: Optional[str] = None, token: Optional[str] = None,
                   config: Optional[str] = None, state_dir: str = ".cluster") -> Target:
    """Resolves the coordinator address and user token as described in the module docstring.

    Raises NotFoundError when no source names a coordinator.
    """
    if config is None:
        config = os.path.join(os.path.expanduser("~"), ".shardline", "config")
    sources = [
        {"coordinator": address or "", "token": token or ""},
        {"coordinator": os.environ.get("SHARDLINE_COORDINATOR", ""),
         "token": os.environ.get("SHARDLINE_TOKEN", "")},
        _read_config(config),
        _read_cluster(state_dir),
    ]
    resolved = {"coordinator": "", "token": ""}
    for source in sources:
        for key in resolved:
            if not resolved[key]:
                resolved[key] = source.get(key, "") or ""
    if not resolved["coordinator"]:
        raise NotFoundError(
            "no coordinator: pass address=HOST:PORT, set $SHARDLINE_COORDINATOR, write "
            "coordinator=HOST:PORT in ~/.shardline/config, or start a local cluster with "
            "`shardctl cluster up`")
    return Target(resolved["coordinator"], resolved["token"])
