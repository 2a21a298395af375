"""Where the coordinator is, which token to send and how to reach it: the same sources, in the
same order, as shardctl (cli/shardctl_main.cc ResolveTarget):

  1. the Client's arguments (shardctl: --coordinator, --token);
  2. $SHARDLINE_COORDINATOR and $SHARDLINE_TOKEN;
  3. the config file (default ~/.shardline/config): lines "coordinator=HOST:PORT", "token=...",
     and for TLS "tls_ca=CA.pem", "tls_cert=...", "tls_key=...", "insecure=true";
  4. the local cluster started by `shardctl cluster up`: <state_dir>/cluster.json
     (state_dir defaults to ".cluster" in the working directory, as shardctl's --state_dir).

Address and token are resolved independently: the first source that names each one wins. A
config file or cluster.json that holds a token must be readable by its owner only (mode 0600),
as shardctl requires; otherwise UnauthenticatedError (PERMISSION_DENIED) says how to fix it.
"""
import ipaddress
import json
import os
import stat
from typing import NamedTuple, Optional

import grpc

from shardline.errors import NotFoundError, UnauthenticatedError


class Target(NamedTuple):
    address: str
    token: str
    # TLS settings from the config file (paths; "" when unset) and its insecure=.
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    insecure: bool = False


def check_owner_only(path: str, what: str) -> None:
    """Raises UnauthenticatedError (PERMISSION_DENIED) when group or others may read `path`,
    with the same message as shardctl (common/secret_file.h)."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        raise UnauthenticatedError(
            "%s: %s has mode %04o: group or other users can read the token in it; run "
            "`chmod 600 %s`" % (what, path, mode, path), grpc.StatusCode.PERMISSION_DENIED)


def is_loopback(address: str) -> bool:
    """The Python twin of common/loopback.h IsLoopbackAddress: 127.0.0.0/8, ::1, localhost,
    unix: sockets; numeric addresses only (no name other than localhost is resolved)."""
    if address.startswith("unix:"):
        return True
    for scheme in ("dns:///", "ipv4:", "ipv6:"):
        if address.startswith(scheme):
            address = address[len(scheme):]
            break
    host = address
    if host.startswith("["):
        host = host[1:host.index("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


_CONFIG_KEYS = ("coordinator", "token", "tls_ca", "tls_cert", "tls_key", "insecure")


def _read_config(path: str) -> dict:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                for key in _CONFIG_KEYS:
                    if line.startswith(key + "="):
                        out[key] = line[len(key) + 1:].strip()
    except OSError:
        return {}
    if out.get("token"):
        check_owner_only(path, "config file")
    return out


def _read_cluster(state_dir: str) -> dict:
    path = os.path.join(state_dir, "cluster.json")
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    check_owner_only(path, "local cluster")
    return {"coordinator": info.get("coordinator_address", ""), "token": info.get("token", "")}


def resolve_target(address: Optional[str] = None, token: Optional[str] = None,
                   config: Optional[str] = None, state_dir: str = ".cluster") -> Target:
    """Resolves the coordinator address, user token and config TLS settings as described in the
    module docstring.

    Raises NotFoundError when no source names a coordinator; UnauthenticatedError for a token
    file (config, cluster.json) others can read.
    """
    if config is None:
        config = os.path.join(os.path.expanduser("~"), ".shardline", "config")
    config_values = _read_config(config)
    sources = [
        {"coordinator": address or "", "token": token or ""},
        {"coordinator": os.environ.get("SHARDLINE_COORDINATOR", ""),
         "token": os.environ.get("SHARDLINE_TOKEN", "")},
        config_values,
    ]
    resolved = {"coordinator": "", "token": ""}
    for source in sources:
        for key in resolved:
            if not resolved[key]:
                resolved[key] = source.get(key, "") or ""
    if not resolved["coordinator"] or not resolved["token"]:
        cluster = _read_cluster(state_dir)
        for key in resolved:
            if not resolved[key]:
                resolved[key] = cluster.get(key, "") or ""
    if not resolved["coordinator"]:
        raise NotFoundError(
            "no coordinator: pass address=HOST:PORT, set $SHARDLINE_COORDINATOR, write "
            "coordinator=HOST:PORT in ~/.shardline/config, or start a local cluster with "
            "`shardctl cluster up`")
    return Target(resolved["coordinator"], resolved["token"],
                  config_values.get("tls_ca", ""), config_values.get("tls_cert", ""),
                  config_values.get("tls_key", ""),
                  config_values.get("insecure", "") in ("true", "1", "yes"))
