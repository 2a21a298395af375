"""The NCCL backend's targets, defined only where @cuda found a toolkit with NCCL (BUILD files
cannot hold a top-level `if`)."""

load("@cuda//:defs.bzl", "HAS_CUDA")

def nccl_targets():
    # :comm_backends is what binaries depend on: CreateCommGroups with Gloo everywhere, plus
    # the NCCL backend where CUDA exists (so CommBackend::kNccl works on GPU machines without
    # every binary spelling the condition).
    native.cc_library(
        name = "comm_backends",
        visibility = ["//trainer:__pkg__", "//fsdp/tests:__pkg__"],
        deps = [":comm_groups"] + ([":nccl_communicator"] if HAS_CUDA else []),
    )
    if not HAS_CUDA:
        return
    native.cc_library(
        name = "nccl_communicator",
        visibility = ["//fsdp/tests:__pkg__"],
        srcs = ["nccl_communicator.cc"],
        hdrs = ["nccl_communicator.h"],
        # Registers the NCCL backend with CreateCommGroups at static-initialisation time.
        alwayslink = True,
        deps = [
            ":comm_args",
            ":comm_queue",
            ":comm_watchdog",
            ":communicator",
            ":comm_groups",
            ":kv_store",
            "@cuda//:nccl",
            "@libtorch//:torch_cuda",
            "@system//:absl",
        ],
    )
    native.cc_test(
        name = "nccl_communicator_test",
        size = "small",
        srcs = ["nccl_communicator_test.cc"],
        linkstatic = True,
        tags = ["gpu"],
        deps = [
            ":comm_groups",
            ":nccl_communicator",
            ":tcp_kv_store",
            "@libtorch//:torch_cuda",
            "@system//:gtest_main",
        ],
    )
    native.cc_test(
        name = "nccl_registration_test",
        size = "small",
        srcs = ["nccl_registration_test.cc"],
        linkstatic = True,
        deps = [
            ":comm_backends",
            ":tcp_kv_store",
            "@system//:gtest_main",
        ],
    )

def cuda_cc_test(**kwargs):
    """A cc_test defined only where @cuda found a toolkit (for GPU tests outside //fsdp, such as
    //fsdp/tests:cpu_offload_gpu_test; tag them "gpu" to keep them out of default runs)."""
    if HAS_CUDA:
        native.cc_test(**kwargs)

def cuda_cc_library(**kwargs):
    """A cc_library defined only where @cuda found a toolkit (test helpers that need CUDA, such as
    //fsdp/testing:standin_communicator)."""
    if HAS_CUDA:
        native.cc_library(**kwargs)
