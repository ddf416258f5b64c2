# SPDX-License-Identifier: Apache-2.0
"""Build step of the fp8d client: the fp8d.v1 stubs are generated from proto/fp8d/v1/*.proto.

protoc writes fp8d/v1/{job,job_service,worker_event}_pb2.py and grpc_python_plugin
fp8d/v1/job_service_pb2_grpc.py straight into the build tree; the proto package fp8d.v1 is the Python
package fp8d.v1, so the generated imports (`from fp8d.v1 import job_pb2`) resolve inside this
package. FP8D_PROTO_DIR, PROTOC and GRPC_PYTHON_PLUGIN override where the inputs and tools are.
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ["fp8d/v1/job.proto", "fp8d/v1/job_service.proto", "fp8d/v1/worker_event.proto"]
SERVICE_PROTO = "fp8d/v1/job_service.proto"  # the one with a service: its _pb2_grpc.py


def find_tool(env, name):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise SystemExit(f"fp8d client build: {name} not found (Debian: apt-get install "
                         f"protobuf-compiler protobuf-compiler-grpc), or set ${env}")
    return path


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        proto_dir = os.environ.get("FP8D_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
        proto_dir = os.path.abspath(proto_dir)
        if not os.path.isfile(os.path.join(proto_dir, PROTOS[0])):
            raise SystemExit(f"fp8d client build: no {PROTOS[0]} under {proto_dir} "
                             "(build from an fp8d checkout or set FP8D_PROTO_DIR)")
        out = os.path.abspath(self.build_lib)
        os.makedirs(os.path.join(out, "fp8d", "v1"), exist_ok=True)
        protoc = [find_tool("PROTOC", "protoc"), f"-I{proto_dir}"]
        subprocess.run(protoc + [f"--python_out={out}"] + PROTOS, check=True)
        plugin = find_tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin")
        subprocess.run(protoc + [f"--plugin=protoc-gen-grpc_python={plugin}",
                                 f"--grpc_python_out={out}", SERVICE_PROTO], check=True)
        with open(os.path.join(out, "fp8d", "v1", "__init__.py"), "w") as f:
            f.write("# Generated from proto/fp8d/v1 at build time.\n")


setup(cmdclass={"build_py": BuildWithStubs})
