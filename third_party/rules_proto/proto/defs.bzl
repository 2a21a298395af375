"""Offline stand-in for rules_proto; protos compile through //third_party/system:proto.bzl."""

def proto_library(**kwargs):
    native.proto_library(**kwargs)
