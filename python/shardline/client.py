"""shardline.Client: submit, watch and inspect Shardline jobs from Python over the coordinator's
gRPC API (proto/coordinator.proto).

Results are the protobuf messages of that API (JobStatus, WorkerInfo, CheckpointInfo,
CheckpointManifest, LogLine, GetJobMetricsResponse), so every field documented there is available; `status.state` compares with
shardline.SUCCEEDED etc., and shardline.state_name(status) gives "SUCCEEDED". Failed calls raise a
shardline.ShardlineError subclass carrying the gRPC code and the coordinator's message.

Thread safety: one Client may be used from several threads (gRPC channels are thread-safe).
"""
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import grpc

from shardline import errors
from shardline._proto import checkpoint_pb2, coordinator_pb2, coordinator_pb2_grpc, job_spec_pb2
from shardline.target import is_loopback, resolve_target

JobState = coordinator_pb2.JobState
TERMINAL_STATES = frozenset({coordinator_pb2.SUCCEEDED, coordinator_pb2.FAILED,
                             coordinator_pb2.CANCELLED})

SpecLike = Union[str, "os.PathLike[str]", Mapping[str, Any], job_spec_pb2.JobSpec]


def state_name(status: coordinator_pb2.JobStatus) -> str:
    """The job's state as a name: "PENDING", "RUNNING", "SUCCEEDED", "FAILED" or "CANCELLED"."""
    return coordinator_pb2.JobState.Name(status.state)


@dataclass
class Checkpoint:
    """One checkpoint of a job: the coordinator's record and, once committed, its manifest."""

    info: coordinator_pb2.CheckpointInfo
    # None for a checkpoint that is not committed yet (no manifest in place).
    manifest: Optional[checkpoint_pb2.CheckpointManifest]

    @property
    def step(self) -> int:
        return self.info.step

    @property
    def committed(self) -> bool:
        return self.info.committed


def _read_bytes(path_or_pem: Union[str, bytes]) -> bytes:
    if isinstance(path_or_pem, bytes):
        return path_or_pem
    with open(path_or_pem, "rb") as f:
        return f.read()


def _credentials(tls: Union[None, bool, str, bytes, grpc.ChannelCredentials],
                 tls_cert: Union[None, str, bytes], tls_key: Union[None, str, bytes]):
    if (tls_cert is None) != (tls_key is None):
        raise errors.ShardlineError("tls_cert and tls_key go together (the client certificate "
                                    "and its private key)")
    if tls is None or tls is False:
        if tls_cert is not None:
            raise errors.ShardlineError("tls_cert needs tls (the CA that signed the "
                                        "coordinator's certificate)")
        return None
    if isinstance(tls, grpc.ChannelCredentials):
        return tls
    chain = _read_bytes(tls_cert) if tls_cert is not None else None
    key = _read_bytes(tls_key) if tls_key is not None else None
    roots = None if tls is True else _read_bytes(tls)
    return grpc.ssl_channel_credentials(root_certificates=roots, private_key=key,
                                        certificate_chain=chain)


class Client:
    """A connection to one coordinator.

    Args:
      address: "host:port" of the coordinator. None: $SHARDLINE_COORDINATOR, then the config
        file, then the local cluster's cluster.json, exactly as shardctl (see shardline.target).
      token: the user bearer token; None: resolved from the same sources as the address.
      tls: None: the config file's tls_ca= if any, else plaintext (as shardctl). False:
        plaintext. True: TLS with the system's root certificates. A str: path of a PEM file of
        root certificates (shardctl's --tls_ca); bytes: the PEM itself; or a
        grpc.ChannelCredentials.
      tls_cert, tls_key: a client certificate (chain) and its private key for mutual TLS, as
        paths or PEM bytes (shardctl's --tls_cert/--tls_key; default: the config file's).
      insecure: allow sending the token in plaintext to a non-loopback address (shardctl's
        --insecure; default: the config file's insecure=). Without it, a token, no TLS and a
        non-loopback address raise FailedPreconditionError before anything is sent.
      config: the config file (default ~/.shardline/config).
      state_dir: the local cluster's state directory (default ".cluster", as shardctl).
      timeout: deadline of each unary call, seconds (shardctl's --timeout_s).
      shardctl: path of the shardctl binary, used only by export(); None: $SHARDLINE_SHARDCTL,
        then `shardctl` on PATH, then ./bazel-bin/cli/shardctl (the repository root's build).

    Raises NotFoundError when no coordinator is configured; UnauthenticatedError when a config
    file or cluster.json holding a token is readable by others; FailedPreconditionError for a
    plaintext token to a non-loopback address. The channel connects lazily: an unreachable
    coordinator raises UnavailableError on the first call.
    """

    def __init__(self, address: Optional[str] = None, token: Optional[str] = None,
                 tls: Union[None, bool, str, bytes, grpc.ChannelCredentials] = None, *,
                 tls_cert: Union[None, str, bytes] = None,
                 tls_key: Union[None, str, bytes] = None, insecure: Optional[bool] = None,
                 config: Optional[str] = None, state_dir: str = ".cluster",
                 timeout: float = 10.0, shardctl: Optional[str] = None):
        target = resolve_target(address, token, config, state_dir)
        self.address = target.address
        self._token = target.token
        self._timeout = timeout
        self._shardctl = shardctl
        if tls is None and target.tls_ca:
            tls = target.tls_ca
        if tls_cert is None and tls_key is None and target.tls_cert:
            tls_cert, tls_key = target.tls_cert, target.tls_key
        if insecure is None:
            insecure = target.insecure
        creds = _credentials(tls, tls_cert, tls_key)
        # export() runs shardctl, which takes the same settings as file paths.
        self._shardctl_tls = []
        if creds is not None:
            if isinstance(tls, str):
                self._shardctl_tls.append("--tls_ca=" + os.path.abspath(tls))
            else:
                self._shardctl_tls = None  # PEM bytes, system roots or credentials: no file
            if self._shardctl_tls is not None and isinstance(tls_cert, str):
                self._shardctl_tls += ["--tls_cert=" + os.path.abspath(tls_cert),
                                       "--tls_key=" + os.path.abspath(tls_key)]
        elif insecure:
            self._shardctl_tls.append("--insecure")
        if creds is None and self._token and not insecure and not is_loopback(self.address):
            raise errors.FailedPreconditionError(
                "refusing to send the token in clear text to %s, which is not a loopback "
                "address: pass tls=CA.pem to connect with TLS, or insecure=True to send it in "
                "plain text on a trusted network" % self.address,
                grpc.StatusCode.FAILED_PRECONDITION)
        self._channel = (grpc.secure_channel(self.address, creds) if creds is not None
                         else grpc.insecure_channel(self.address))
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Closes the channel; the client cannot be used afterwards."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _metadata(self):
        return (("authorization", "Bearer " + self._token),) if self._token else ()

    def _call(self, method, request):
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata())
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    # ------------------------------------------------------------------ jobs

    def submit(self, spec: SpecLike, overrides: Optional[Sequence[str]] = None,
               base_dir: Optional[str] = None) -> str:
        """Submits a job and returns its id.

        The spec is sent as the user wrote it; the coordinator resolves it with the same code as
        `shardctl submit` (presets, defaults, overrides, validation), so fields may be left out
        (`{"model": {"preset": "tiny"}}` is a complete model). GetJob returns the resolved spec.

        Args:
          spec: a path (str or os.PathLike) of a YAML or JSON spec file; a dict (sent as JSON);
            or a shardline.JobSpec message, which must be complete: it is sent as an already
            resolved spec and gets no presets or defaults (the old SubmitJob form).
          overrides: "path=value" assignments applied in order after parsing, with the semantics
            of `shardctl submit --set`, e.g. ["optimizer.lr=1e-3", "train.steps=20"].
          base_dir: directory that relative paths in the spec (data.path, checkpoint.dir, ...)
            are taken against, as the workers see it. None: the spec file's directory for a path
            (as shardctl), the current working directory for a dict. The coordinator has no
            working directory of its own, so without a base a relative path is refused.

        Raises:
          InvalidSpecError: the spec does not parse or validate; the message names the field.
          UnauthenticatedError: missing or wrong token.
          ShardlineError: any other failure (with its gRPC code).
        """
        request = coordinator_pb2.SubmitJobRequest()
        if isinstance(spec, job_spec_pb2.JobSpec):
            if overrides or base_dir:
                raise errors.InvalidSpecError(
                    "overrides and base_dir need a spec file or dict, not a JobSpec message",
                    grpc.StatusCode.INVALID_ARGUMENT)
            request.spec.CopyFrom(spec)
        elif isinstance(spec, Mapping):
            request.spec_text = json.dumps(spec)
            request.source = "spec dict"
            request.base_dir = os.path.abspath(base_dir or os.getcwd())
        else:
            path = os.fspath(spec)
            try:
                with open(path) as f:
                    request.spec_text = f.read()
            except OSError as e:
                raise errors.NotFoundError("job spec \"%s\" cannot be read: %s" % (path, e.strerror),
                                           grpc.StatusCode.NOT_FOUND) from None
            request.source = path
            request.base_dir = os.path.abspath(base_dir or os.path.dirname(os.path.abspath(path)))
        request.overrides.extend(overrides or ())
        return self._call(self._stub.SubmitJob, request).job_id

    def get(self, job: str) -> coordinator_pb2.JobStatus:
        """The job's status: state, resolved spec, progress, placement, events, sample.

        Raises NotFoundError for an unknown job id."""
        return self._call(self._stub.GetJob, coordinator_pb2.GetJobRequest(job_id=job))

    def list(self, states: Optional[Iterable[Union[str, int]]] = None
             ) -> List[coordinator_pb2.JobStatus]:
        """Every job, or only those in `states` (names like "RUNNING" or JobState values)."""
        request = coordinator_pb2.ListJobsRequest()
        for s in states or ():
            request.states.append(coordinator_pb2.JobState.Value(s) if isinstance(s, str) else s)
        jobs = []
        while True:  # page by page, at the coordinator's default page size
            response = self._call(self._stub.ListJobs, request)
            jobs.extend(response.jobs)
            if not response.next_page_token:
                return jobs
            request.page_token = response.next_page_token

    def watch(self, job: str, timeout: Optional[float] = None
              ) -> Iterator[coordinator_pb2.JobStatus]:
        """Yields the job's status now, then again on every change (progress step, state,
        event), ending after the first status in a final state (SUCCEEDED, FAILED, CANCELLED).

        Args:
          timeout: seconds the whole watch may take (None: no limit); past it UnavailableError.

        Raises NotFoundError for an unknown job; UnavailableError when the stream breaks.
        """
        stream = self._stub.WatchJob(coordinator_pb2.WatchJobRequest(job_id=job),
                                     timeout=timeout, metadata=self._metadata())
        try:
            for status in stream:
                yield status
                if status.state in TERMINAL_STATES:
                    return
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            stream.cancel()
        raise errors.UnavailableError("watch of %s ended before the job did" % job,
                                      grpc.StatusCode.UNAVAILABLE)

    def wait(self, job: str, timeout: Optional[float] = None) -> coordinator_pb2.JobStatus:
        """Watches the job to its end and returns its final status (whatever the state)."""
        last = None
        for last in self.watch(job, timeout=timeout):
            pass
        return last

    def cancel(self, job: str, reason: str = "cancelled from the Python client") -> None:
        """Stops every rank of the job; it ends CANCELLED.

        Raises NotFoundError for an unknown job, FailedPreconditionError when it already ended,
        UnauthenticatedError (code PERMISSION_DENIED) unless the caller owns the job
        (JobStatus.owner) or is an admin."""
        self._call(self._stub.CancelJob, coordinator_pb2.CancelJobRequest(job_id=job,
                                                                          reason=reason))

    # ------------------------------------------------------------------ logs, training metrics

    def logs(self, job: str, rank: Optional[int] = None, attempt: int = 0, tail: int = 0,
             since: Optional[float] = None, follow: bool = False,
             poll_interval: float = 0.5) -> Iterator[coordinator_pb2.LogLine]:
        """Yields the job's log lines as the coordinator keeps them (the worker daemons ship
        every rank's output to it; docs/observability.md), oldest first. Each LogLine has
        attempt, rank, time_unix_ms and text.

        Args:
          rank: only this rank; None: every rank.
          attempt: only this attempt; 0: all the coordinator holds.
          tail: only the last `tail` lines of each rank (0: all).
          since: only lines read at or after this time (seconds since the epoch).
          follow: keep yielding new lines until the job has ended and its last lines came.
          poll_interval: seconds between looks while following.

        Raises NotFoundError for an unknown job.
        """
        request = coordinator_pb2.GetLogsRequest(
            job_id=job, rank=rank if rank is not None else 0, all_ranks=rank is None,
            attempt=attempt, tail_lines=tail,
            since_unix_ms=int(since * 1000) if since is not None else 0)
        seen_finished = False
        while True:
            resp = self._call(self._stub.GetLogs, request)
            yield from resp.lines
            request.after_seq = resp.next_seq
            request.tail_lines = 0
            if resp.truncated:
                continue
            if not follow or seen_finished:
                return
            seen_finished = resp.job_finished
            time.sleep(poll_interval)

    def metrics(self, job: str, after_step: int = 0) -> coordinator_pb2.GetJobMetricsResponse:
        """The job's training series: `points` (MetricsPoint: step, loss, val_loss (NaN where no
        step of the point evaluated), lr, grad_norm, tokens_per_s, mfu, step_time_s,
        peak_memory_bytes; each the mean of `count` logged steps once a long run is
        downsampled), `latest` (the newest report), `reported_steps`, `stride`,
        `per_rank_peak_memory_bytes`, `total_steps`, `eta_s` and `state`.

        Args:
          after_step: only points whose last step is after this one.

        Raises NotFoundError for an unknown job.
        """
        return self._call(self._stub.GetJobMetrics,
                          coordinator_pb2.GetJobMetricsRequest(job_id=job, after_step=after_step))

    # ------------------------------------------------------------------ checkpoints, workers

    def checkpoints(self, job: str, manifests: bool = True) -> List[Checkpoint]:
        """The job's checkpoints in step order, each committed one with its manifest (files,
        tensors, shard layout; checkpoint.proto) when `manifests` is true."""
        infos = self._call(self._stub.ListCheckpoints,
                           coordinator_pb2.ListCheckpointsRequest(job_id=job)).checkpoints
        out = []
        for info in sorted(infos, key=lambda c: c.step):
            manifest = None
            if manifests and info.committed:
                manifest = self._call(
                    self._stub.GetCheckpoint,
                    coordinator_pb2.GetCheckpointRequest(job_id=job, step=info.step)).manifest
            out.append(Checkpoint(info, manifest))
        return out

    def whoami(self) -> coordinator_pb2.WhoAmIResponse:
        """Who the coordinator takes this client's token for: user (name), admin, and credential
        ("user token", "worker join token", "attempt credential" or "none")."""
        return self._call(self._stub.WhoAmI, coordinator_pb2.WhoAmIRequest())

    def workers(self) -> List[coordinator_pb2.WorkerInfo]:
        """Registered workers with their slots, state and busy slots."""
        return list(self._call(self._stub.ListWorkers,
                               coordinator_pb2.ListWorkersRequest()).workers)

    def export(self, job: str, step: Optional[int], path: str) -> str:
        """Writes the model of a committed checkpoint as one .safetensors file at `path`.

        This runs `shardctl export` (the C++ exporter, checkpoint::ExportSafetensors), which asks
        the coordinator where the checkpoint is and reads its shard files from this machine's
        file system: it needs a local shardctl binary (the Client's `shardctl` argument,
        $SHARDLINE_SHARDCTL, PATH, or ./bazel-bin/cli/shardctl) and the checkpoint directory visible here (a local cluster
        or a shared file system). Over TLS shardctl gets the client's CA (and client certificate)
        as --tls_ca (--tls_cert, --tls_key): they must have been given as file paths.

        Args:
          step: checkpoint step; None: the latest committed one.
        Returns the path written. Raises NotFoundError when the job has no such committed
        checkpoint, ExportError when shardctl is missing or fails otherwise.
        """
        # Last, the Bazel build's output seen from the repository root, where the README's
        # examples run.
        built = os.path.join("bazel-bin", "cli", "shardctl")
        binary = (self._shardctl or os.environ.get("SHARDLINE_SHARDCTL") or shutil.which("shardctl")
                  or (os.path.abspath(built) if os.access(built, os.X_OK) else None))
        if not binary:
            raise errors.ExportError("export needs the shardctl binary: pass Client(shardctl=...), "
                                     "set $SHARDLINE_SHARDCTL, put shardctl on PATH or run from "
                                     "the repository root after building it (bazel-bin/cli/"
                                     "shardctl)")
        if self._shardctl_tls is None:
            raise errors.ExportError("export runs shardctl, which reads TLS settings from files: "
                                     "create the Client with tls= (and tls_cert=, tls_key=) as "
                                     "paths rather than PEM bytes or credentials")
        argv = [binary, "export", job, "--out=" + path, "--coordinator=" + self.address,
                "--timeout_s=%d" % max(1, int(self._timeout))] + self._shardctl_tls
        if step is not None:
            argv.append("--step=%d" % step)
        env = dict(os.environ)
        env.pop("SHARDLINE_TOKEN", None)
        if self._token:
            env["SHARDLINE_TOKEN"] = self._token  # not on the command line, where ps shows it
        proc = subprocess.run(argv, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            message = proc.stderr.strip().replace("shardctl: ", "", 1)
            # shardctl's exit codes: 5 not found, 6 refused (see cli/shardctl_main.cc).
            if proc.returncode == 5:
                raise errors.NotFoundError(message, grpc.StatusCode.NOT_FOUND)
            if proc.returncode == 6:
                raise errors.UnauthenticatedError(message, grpc.StatusCode.UNAUTHENTICATED)
            raise errors.ExportError("shardctl export exited %d: %s" % (proc.returncode, message))
        return path
