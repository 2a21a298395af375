"""Every command line in deploy/ must parse with the real binaries, and none may carry a token.

Extracts each invocation of coordinator, worker and shardctl from the recipes (systemd ExecStart
lines, Kubernetes `command:` lists, Slurm and shell lines), substitutes the recipe's variables
with sample values, and runs the binary with the same flags plus --check_flags (parse and
validate the flags, then exit 0). A flag a binary does not have makes absl's parser exit non-zero,
failing the test with the recipe file and line. Files the flags name (token files, TLS
certificates) are made as samples first (token files mode 0600, as the binaries require).

A token on a command line is readable by every local user (/proc/PID/cmdline), so a recipe that
passes --token=, --worker_token= or --join_token= (or a token's value in any argument) fails the
test: recipes read tokens from files (--token_file, --worker_token_file, --join_token_file) or
the environment.

Usage (from the Bazel test): recipe_flags_test.py DEPLOY_DIR coordinator=PATH worker=PATH ...
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

SAMPLE_ENV = {
    "SHARDLINE_TOKEN": "sample-user-secret-7f3a",
    "SHARDLINE_JOIN_TOKEN": "sample-join-secret-9c2e",
    "SHARDLINE_COORDINATOR": "127.0.0.1:7070",
    "NODE_IP": "127.0.0.1",
    "NODE_NAME": "node-0",
    "SLURM_JOB_ID": "42",
    "STATE": "",  # filled per run with a temp dir
    "SPEC": "",   # filled with a sample spec path
    "HOME": "",
}


def substitute(text, env):
    text = re.sub(r"\$\(hostname[^)]*\)", "127.0.0.1", text)
    for name, value in env.items():
        text = text.replace("${%s}" % name, value).replace("$(%s)" % name, value)
        text = re.sub(r"\$%s\b" % name, value, text)
    return text


def kubernetes_commands(path, lines):
    """Each `command:` list (one '- ' item per line) is one command line."""
    out = []
    i = 0
    while i < len(lines):
        if re.match(r"\s*command:\s*$", lines[i]):
            start = i + 1
            items = []
            j = start
            while j < len(lines) and re.match(r"\s*- ", lines[j]):
                items.append(re.sub(r"^\s*- ", "", lines[j]).strip())
                j += 1
            out.append((path, start + 1, items))
            i = j
        else:
            i += 1
    return out


def shell_commands(path, lines, binaries):
    """Lines (after ExecStart=, srun wrappers, bash -c quoting) that run one of `binaries`."""
    out = []
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        stripped = re.sub(r"^ExecStart=", "", stripped)
        m = re.search(r"bash -c '(.*)'", stripped)
        if m:
            stripped = m.group(1)
        for name in binaries:
            idx = stripped.find("/usr/local/bin/%s " % name)
            if idx < 0:
                continue
            cmd = stripped[idx:].rstrip("&").strip()
            out.append((path, n, shlex.split(cmd)))
    return out


# Flags whose value is a secret, and sample secret values that must never appear in an argument.
TOKEN_FLAG = re.compile(r"^--?(token|worker_token|join_token)(=|$)")
SAMPLE_SECRETS = (SAMPLE_ENV["SHARDLINE_TOKEN"], SAMPLE_ENV["SHARDLINE_JOIN_TOKEN"])
# Recipes another change rewrites (issue 14); the lead empties this when merging it.
TOKEN_CHECK_PENDING = ()


def tokens_on_command_line(args):
    """The arguments of `args` that put a token on the command line."""
    return [a for a in args
            if TOKEN_FLAG.match(a) or any(secret in a for secret in SAMPLE_SECRETS)]


SAMPLE_PEM = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
FILE_FLAG = re.compile(r"^--(\w+_file|tls_ca|tls_cert|tls_key|tls_client_ca)=(.+)$")


def with_sample_files(args, tmp):
    """`args` with each file flag's path moved under `tmp` (a recipe's /etc/shardline/x.token
    becomes TMP/root/etc/shardline/x.token) and that file made: a token (mode 0600, as the
    binaries require) or a PEM sample."""
    out = []
    for a in args:
        m = FILE_FLAG.match(a)
        if not m:
            out.append(a)
            continue
        path = m.group(2)
        if not path.startswith(tmp):
            path = os.path.join(tmp, "root", path.lstrip("/"))
        out.append("--%s=%s" % (m.group(1), path))
        if os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        is_token = m.group(1).endswith("token_file")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600 if is_token else 0o644)
        with os.fdopen(fd, "w") as f:
            f.write("sample-token-from-file\n" if is_token else SAMPLE_PEM)
    return out


def main():
    deploy_dir = sys.argv[1]
    binaries = dict(arg.split("=", 1) for arg in sys.argv[2:])
    tmp = tempfile.mkdtemp(prefix="recipe_flags_")
    env = dict(SAMPLE_ENV, STATE=tmp, HOME=tmp, SPEC=os.path.join(tmp, "spec.yaml"))
    with open(env["SPEC"], "w") as f:
        f.write("name: sample\n")
    found = []
    for root, _, files in os.walk(deploy_dir):
        for fname in sorted(files):
            path = os.path.join(root, fname)
            with open(path) as f:
                raw = f.read()
            lines = substitute(raw, env).splitlines()
            if fname.endswith(".yaml"):
                found += kubernetes_commands(path, lines)
            else:
                found += shell_commands(path, lines, binaries)
    failures = []
    checked = {name: 0 for name in binaries}
    for path, line, argv in found:
        name = os.path.basename(argv[0])
        if name not in binaries:
            continue
        checked[name] += 1
        args = [a for a in argv[1:]]
        # Directories named by the recipe are created by systemd/k8s/Slurm; make them here.
        args = [a.replace("/var/lib/shardline", os.path.join(tmp, "var")) for a in args]
        leaked = tokens_on_command_line(args)
        if leaked and not any("/%s/" % d in path for d in TOKEN_CHECK_PENDING):
            failures.append("%s:%d: a token on the command line (readable in /proc/PID/cmdline; "
                            "use a token file or the environment): %s"
                            % (path, line, " ".join(leaked)))
        # Root-run worker recipes start trainers as their own user (Slurm's run as the user).
        if (name == "worker" and "/slurm/" not in path and
                "--trainer_user=shardline-trainer" not in args):
            failures.append("%s:%d: a worker run as root without --trainer_user=shardline-trainer"
                            " (job code could read the node's credentials)" % (path, line))
        args = with_sample_files(args, tmp)
        proc = subprocess.run([binaries[name]] + args + ["--check_flags"],
                              capture_output=True, text=True, timeout=60)
        status = "ok" if proc.returncode == 0 else "FAILED (exit %d)" % proc.returncode
        print("%s:%d %s %s -> %s" % (path, line, name, " ".join(args), status))
        if proc.returncode != 0:
            failures.append("%s:%d: %s\n%s" % (path, line, " ".join(argv), proc.stderr[-2000:]))
    for name, count in checked.items():
        if count == 0:
            failures.append("no command line of %s found in %s" % (name, deploy_dir))
    # The check must be able to fail: a flag nobody has is refused by every binary.
    for name, binary in binaries.items():
        proc = subprocess.run([binary, "--no_such_flag_anywhere=1", "--check_flags"],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            failures.append("%s accepted an unknown flag: the check proves nothing" % name)
    # The token check must be able to fail too.
    for bad in (["--token=x"], ["--join_token", "x"], ["--worker_token=x"],
                ["--note=" + SAMPLE_ENV["SHARDLINE_TOKEN"]]):
        if not tokens_on_command_line(bad):
            failures.append("the token check misses %s: it proves nothing" % bad)
    for good in (["--token_file=/etc/t"], ["--join_token_file=/t"], ["--tls_ca=/ca.pem"]):
        if tokens_on_command_line(good):
            failures.append("the token check refuses %s, a file flag" % good)
    if failures:
        print("\n\n".join(failures))
        sys.exit(1)
    print("all %d recipe command lines parse" % sum(checked.values()))


if __name__ == "__main__":
    main()
