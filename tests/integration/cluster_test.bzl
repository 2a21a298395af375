"""cluster_sh_test: an end-to-end test script run against the real binaries."""

_BINARIES = {
    "coordinator": "//coordinator:coordinator",
    "worker": "//worker:worker",
    "trainer": "//trainer:trainer",
    "shardctl": "//cli:shardctl",
}

def cluster_sh_test(name, timeout = None, extra_args = [], extra_data = []):
    """Runs <name>.py through run_python.sh with the cluster binaries' paths as arguments.

    Tagged "exclusive": the tests are timing-sensitive (heartbeats, grace periods, collective
    timeouts) and run alone, not beside the parity shards. harness.py and cluster_test.py (which
    the scenario scripts import) and the corpus come with every one.
    """
    script = name + ".py"
    native.sh_test(
        name = name,
        size = "large",
        timeout = timeout,
        srcs = ["run_python.sh"],
        args = ["$(location %s)" % script] +
               ["%s=$(location %s)" % (k, v) for k, v in _BINARIES.items()] + extra_args,
        data = {f: True for f in [script, "cluster_test.py", "harness.py", "//data:tinyshakespeare.txt"] +
                                 _BINARIES.values() + extra_data}.keys(),
        env = {"SHARDLINE_CORPUS": "data/tinyshakespeare.txt"},
        tags = ["exclusive"],
    )
