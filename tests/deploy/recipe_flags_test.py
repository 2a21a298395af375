"""Every command line in deploy/ must parse with the real binaries.

Extracts each invocation of coordinator, worker and shardctl from the recipes (systemd ExecStart
lines, Kubernetes `command:` lists, Slurm and shell lines), substitutes the recipe's variables
with sample values, and runs the binary with the same flags plus --check_flags (parse and
validate the flags, then exit 0). A flag a binary does not have makes absl's parser exit non-zero,
failing the test with the recipe file and line.

Usage (from the Bazel test): recipe_flags_test.py DEPLOY_DIR coordinator=PATH worker=PATH ...
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

SAMPLE_ENV = {
    "SHARDLINE_TOKEN": "user-token",
    "SHARDLINE_JOIN_TOKEN": "join-token",
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
        # Token files come from the recipe's secrets (a Kubernetes Secret volume under
        # /etc/shardline); --check_flags reads them, so write sample ones.
        args = [a.replace("/etc/shardline", os.path.join(tmp, "etc")) for a in args]
        for a in args:
            m = re.match(r"--\w*token_file=(.+)", a)
            if m and m.group(1).startswith(tmp):
                os.makedirs(os.path.dirname(m.group(1)), exist_ok=True)
                with open(m.group(1), "w") as f:
                    f.write("sample-token\n")
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
    if failures:
        print("\n\n".join(failures))
        sys.exit(1)
    print("all %d recipe command lines parse" % sum(checked.values()))


if __name__ == "__main__":
    main()
