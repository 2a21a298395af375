"""forbidden_deps_test: a package's dependency rule, checked on the build graph."""

def forbidden_deps_test(name, targets, forbidden, size = "small"):
    """Fails when deps(targets) holds a label matching one of `forbidden` (extended regexes).

    A genquery lists deps(targets) (scope: the targets themselves, so the whole transitive
    closure is loaded) at build time; tools/forbidden_deps_test.sh reads that list.
    """
    expr = " + ".join(targets)
    native.genquery(
        name = name + "_deps",
        expression = "deps(%s)" % expr,
        scope = targets,
    )
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//tools:forbidden_deps_test.sh"],
        args = ["$(location :%s_deps)" % name, "'deps(%s)'" % expr] + ["'%s'" % f for f in forbidden],
        data = [":%s_deps" % name],
    )
