"""Shardline's Python client: submit, watch and inspect FSDP training jobs on a coordinator.

    import shardline
    client = shardline.Client()                      # same config and environment as shardctl
    job = client.submit({"model": {"preset": "tiny"}, "data": {"path": "corpus.txt"}},
                        overrides=["train.steps=20"])
    for status in client.watch(job):
        print(status.step, status.loss)

Errors are shardline.ShardlineError subclasses carrying the gRPC code and the coordinator's
message. The gRPC stubs (shardline._proto) are generated from proto/ at install time.
"""
from shardline._proto.checkpoint_pb2 import CheckpointManifest
from shardline._proto.coordinator_pb2 import (CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED,
                                              CheckpointInfo, JobStatus, WorkerInfo)
from shardline._proto.job_spec_pb2 import JobSpec
from shardline.client import TERMINAL_STATES, Checkpoint, Client, JobState, state_name
from shardline.errors import (ExportError, FailedPreconditionError, InvalidSpecError,
                              NotFoundError, ShardlineError, UnauthenticatedError,
                              UnavailableError)

__all__ = [
    "Client", "Checkpoint", "JobState", "state_name", "TERMINAL_STATES",
    "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED",
    "JobSpec", "JobStatus", "WorkerInfo", "CheckpointInfo", "CheckpointManifest",
    "ShardlineError", "InvalidSpecError", "NotFoundError", "UnauthenticatedError",
    "UnavailableError", "FailedPreconditionError", "ExportError",
]
