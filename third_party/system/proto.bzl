"""cc_proto: C++ (and optionally gRPC) code from .proto files with the system protoc.

Debian's protobuf 3.21 and gRPC 1.51 runtime libraries must match the generator, so the build
uses /usr/bin/protoc and /usr/bin/grpc_cpp_plugin rather than any downloaded toolchain.
"""

def cc_proto(name, srcs, deps = [], grpc = False, visibility = None):
    """Generates <src>.pb.{h,cc} (and .grpc.pb.{h,cc} when grpc) and a cc_library `name`."""
    bases = [s[:-len(".proto")] for s in srcs]
    outs = []
    for b in bases:
        outs += [b + ".pb.h", b + ".pb.cc"]
        if grpc:
            outs += [b + ".grpc.pb.h", b + ".grpc.pb.cc"]
    proto_deps = [d + "_srcs" for d in deps]
    grpc_flags = ""
    if grpc:
        grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    native.filegroup(name = name + "_srcs", srcs = srcs + proto_deps, visibility = visibility)
    native.genrule(
        name = name + "_gen",
        srcs = srcs + proto_deps,
        outs = outs,
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR) %s %s" % (
            grpc_flags,
            " ".join(["$(location %s)" % s for s in srcs]),
        ),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:protobuf"] + (["@system//:grpc"] if grpc else []),
        visibility = visibility,
    )
