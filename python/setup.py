"""Builds the shardline package; the gRPC stubs are generated from ../proto at build time.

pip builds in place (pip >= 21.3), so ../proto is reachable; SHARDLINE_PROTO_DIR names another
proto/ directory. tools/setup.sh installs with --no-build-isolation, using the venv's
grpcio-tools; an isolated build gets grpcio-tools from pyproject.toml's build requirements.
"""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_protos  # noqa: E402


class BuildPyWithProtos(build_py):
    def run(self):
        super().run()
        proto_dir = os.environ.get("SHARDLINE_PROTO_DIR", os.path.join(HERE, "..", "proto"))
        gen_protos.generate(proto_dir, self.build_lib)


setup(cmdclass={"build_py": BuildPyWithProtos})
