"""The Kubernetes recipe (deploy/kubernetes) is valid and keeps checkpoints and state safe.

1. Every YAML document there validates, strictly (unknown fields are errors), against the
   Kubernetes JSON schemas of the pinned versions below, with kubernetes-validate (pinned in
   tools/setup.sh; it ships the schemas, so nothing is fetched). A deliberately broken copy must
   fail, so the check can fail.
2. Facts no schema can check, across objects:
   - the workers and the coordinator mount one checkpoint claim, ReadWriteMany, at the same path,
     and no node-local (hostPath) volume at, above or below that path;
   - the coordinator runs as one replica with --state_dir on a persistent volume of its own (not
     the shared checkpoint volume: SQLite needs local locking);
   - no token on a command line: token flags name files on a Secret volume, token variables come
     from Secrets;
   - the health probe, resource requests and the GPU resource are there.

Usage (from the Bazel test, with the venv's python): kubernetes_manifests_test.py DEPLOY_DIR
"""
import copy
import os
import re
import sys
import unittest
import xml.etree.ElementTree as ET

import kubernetes_validate
import yaml

# The oldest Kubernetes release the recipe supports (gRPC probes are GA since 1.27) and the
# newest whose schemas the pinned kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

DEPLOY_DIR = None  # set by main()
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")
TOKEN_FLAG = re.compile(r"^--(\w*token)(=|$)")


def load_documents():
    """[(file, index, document)] of every YAML document under deploy/kubernetes."""
    root = os.path.join(DEPLOY_DIR, "kubernetes")
    docs = []
    for name in sorted(os.listdir(root)):
        if not name.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(root, name)) as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is not None:
                    docs.append((name, i, doc))
    return docs


def validation_errors(doc, version):
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return "%s: %s" % ("/".join(str(p) for p in e.path), e.message)
    return None


class Workload:
    """One workload object's pod template, with the lookups the checks need."""

    def __init__(self, doc):
        self.doc = doc
        self.spec = doc["spec"]
        self.pod = self.spec["template"]["spec"]
        self.volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        # StatefulSet claims: a volume named like the template, one claim per pod.
        self.claim_templates = {t["metadata"]["name"]: t
                                for t in self.spec.get("volumeClaimTemplates", [])}

    def container(self, binary):
        for c in self.pod["containers"]:
            if c.get("command") and c["command"][0].endswith("/" + binary):
                return c
        return None

    def mount_for(self, container, path):
        """The volumeMount holding `path` (the longest mountPath that is it or a parent)."""
        best = None
        for m in container.get("volumeMounts", []):
            mp = m["mountPath"].rstrip("/") or "/"
            if path == mp or path.startswith(mp.rstrip("/") + "/"):
                if best is None or len(mp) > len(best["mountPath"]):
                    best = m
        return best


class KubernetesManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_documents()
        cls.claims = {d["metadata"]["name"]: d for _, _, d in cls.docs
                      if d["kind"] == "PersistentVolumeClaim"}
        workloads = [Workload(d) for _, _, d in cls.docs if d["kind"] in WORKLOAD_KINDS]
        cls.coordinator = next(w for w in workloads if w.container("coordinator"))
        cls.worker = next(w for w in workloads if w.container("worker"))
        cls.workloads = workloads

    def checkpoint_mounts(self, workload, binary):
        """{mountPath: claim name} of the shared claims (PersistentVolumeClaim volumes)."""
        out = {}
        for m in workload.container(binary).get("volumeMounts", []):
            v = workload.volumes.get(m["name"], {})
            if "persistentVolumeClaim" in v:
                out[m["mountPath"]] = v["persistentVolumeClaim"]["claimName"]
        return out

    # ---- 1. schemas -----------------------------------------------------------------------

    def test_every_document_validates_against_the_pinned_kubernetes_schemas(self):
        self.assertGreaterEqual(len(self.docs), 4)
        for version in KUBERNETES_VERSIONS:
            for name, i, doc in self.docs:
                with self.subTest(file=name, document=i, version=version):
                    self.assertIsNone(validation_errors(doc, version))

    def test_broken_manifests_fail_validation(self):
        # The check can fail: a misspelled field, a wrong type, a missing required field.
        worker = copy.deepcopy(self.worker.doc)
        pod = worker["spec"]["template"]["spec"]
        pod["containerz"] = pod.pop("containers")
        claim = copy.deepcopy(next(iter(self.claims.values())))
        claim["spec"]["accessModes"] = "ReadWriteMany"  # a string, not a list
        coordinator = copy.deepcopy(self.coordinator.doc)
        del coordinator["spec"]["selector"]
        for doc in (worker, claim, coordinator):
            for version in KUBERNETES_VERSIONS:
                with self.subTest(kind=doc["kind"], version=version):
                    self.assertIsNotNone(validation_errors(doc, version))

    # ---- 2. cross-object facts ------------------------------------------------------------

    def test_one_read_write_many_checkpoint_claim_at_the_same_path_on_workers_and_coordinator(self):
        worker = self.checkpoint_mounts(self.worker, "worker")
        coordinator = self.checkpoint_mounts(self.coordinator, "coordinator")
        self.assertEqual(len(worker), 1, "the worker must mount exactly one shared claim")
        self.assertEqual(worker, coordinator,
                         "the coordinator must mount the workers' checkpoint claim at their path")
        (path, claim_name), = worker.items()
        self.assertIn(claim_name, self.claims, "claim %s is not defined" % claim_name)
        claim = self.claims[claim_name]
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteMany"])
        self.assertTrue(claim["spec"].get("storageClassName"),
                        "the checkpoint claim names its (RWX) storage class")
        # No node-local volume at, above or below the checkpoint path.
        for w, binary in ((self.worker, "worker"), (self.coordinator, "coordinator")):
            for m in w.container(binary).get("volumeMounts", []):
                if "hostPath" not in w.volumes.get(m["name"], {}):
                    continue
                mp = m["mountPath"].rstrip("/")
                self.assertFalse(
                    mp == path or path.startswith(mp + "/") or mp.startswith(path + "/"),
                    "hostPath %s covers the checkpoint path %s" % (mp, path))

    def test_coordinator_state_dir_is_on_its_own_persistent_volume(self):
        self.assertEqual(self.coordinator.spec.get("replicas"), 1)
        container = self.coordinator.container("coordinator")
        state = [a.split("=", 1)[1] for a in container["command"] + container.get("args", [])
                 if a.startswith("--state_dir=")]
        self.assertEqual(len(state), 1, "the coordinator needs --state_dir")
        mount = self.coordinator.mount_for(container, state[0])
        self.assertIsNotNone(mount, "--state_dir=%s is on no volume" % state[0])
        name = mount["name"]
        if name in self.coordinator.claim_templates:
            claim = self.coordinator.claim_templates[name]
        else:
            volume = self.coordinator.volumes.get(name, {})
            self.assertIn("persistentVolumeClaim", volume,
                          "--state_dir is on volume %s, not a persistent volume" % name)
            claim = self.claims[volume["persistentVolumeClaim"]["claimName"]]
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteOnce"],
                         "SQLite state wants a volume of its own, not a shared one")

    def test_no_token_on_a_command_line(self):
        for w in self.workloads:
            for c in w.pod["containers"]:
                secret_mounts = [m["mountPath"] for m in c.get("volumeMounts", [])
                                 if "secret" in w.volumes.get(m["name"], {})]
                for arg in c.get("command", []) + c.get("args", []):
                    with self.subTest(container=c["name"], arg=arg):
                        self.assertNotRegex(arg, r"TOKEN\)")  # $(SHARDLINE_..._TOKEN)
                        m = TOKEN_FLAG.match(arg)
                        self.assertIsNone(m, "a token flag on the command line: " + arg)
                        if re.match(r"^--\w*token_file=", arg):
                            path = arg.split("=", 1)[1]
                            self.assertTrue(
                                any(path.startswith(p.rstrip("/") + "/") for p in secret_mounts),
                                "%s is not on a Secret volume" % path)
                for env in c.get("env", []):
                    if "TOKEN" in env["name"]:
                        with self.subTest(container=c["name"], env=env["name"]):
                            self.assertNotIn("value", env)
                            self.assertIn("secretKeyRef", env.get("valueFrom", {}))
        # The worker gets its join token as a file on a Secret volume (checked above).
        worker_args = self.worker.container("worker")["command"]
        self.assertTrue(any(a.startswith("--join_token_file=") for a in worker_args), worker_args)
        # Trainers (job code) run as the image's unprivileged user, which can write checkpoints
        # through the pod's fsGroup (deploy/container/Dockerfile makes it with id 10001).
        self.assertIn("--trainer_user=shardline-trainer", worker_args)
        self.assertEqual(self.worker.pod["securityContext"]["fsGroup"],
                         10001)

    def test_tls_and_path_roots_everywhere(self):
        # Clients refuse to send a token in clear text off loopback: the coordinator serves TLS
        # with mutual TLS for workers, and every worker trusts its CA and presents a node cert.
        coordinator = self.coordinator.container("coordinator")["command"]
        worker = self.worker.container("worker")["command"]
        for flag in ("--tls_cert=", "--tls_key=", "--tls_client_ca="):
            self.assertTrue(any(a.startswith(flag) for a in coordinator), flag)
        for flag in ("--tls_ca=", "--tls_cert=", "--tls_key="):
            self.assertTrue(any(a.startswith(flag) for a in worker), flag)
        # Both check specs against the same roots; checkpoints only on the shared claim.
        for args in (coordinator, worker):
            self.assertIn("--checkpoint_roots=/checkpoints", args)
            self.assertIn("--read_roots=/data", args)

    def test_probes_requests_and_gpus_are_kept(self):
        coordinator = self.coordinator.container("coordinator")
        self.assertEqual(coordinator["readinessProbe"]["grpc"]["port"], 7070)
        self.assertIn("requests", coordinator.get("resources", {}))
        worker = self.worker.container("worker")
        self.assertGreater(int(worker["resources"]["limits"]["nvidia.com/gpu"]), 0)


def write_junit(path, test_ids, result):
    """One <testcase> per test method, so tools/test.sh counts each (as harness.py does)."""
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="kubernetes_manifests_test",
                          tests=str(len(test_ids)), failures=str(len(result.failures)),
                          errors=str(len(result.errors)), skipped=str(len(result.skipped)))
    bad = {}
    for test, tb in result.failures + result.errors:
        # A failed subTest reports as "<test id> (<params>)": charge it to its test method.
        bad.setdefault(test.id().split(" ")[0], tb)
    for test_id in test_ids:
        case = ET.SubElement(suite, "testcase", classname="kubernetes_manifests_test",
                             name=test_id.split(".")[-1])
        if test_id in bad:
            ET.SubElement(case, "failure", message="failed").text = bad[test_id]
    ET.ElementTree(root).write(path)


def main():
    global DEPLOY_DIR
    DEPLOY_DIR = sys.argv[1]
    print("kubernetes-validate %s; Kubernetes versions %s" % (
        kubernetes_validate.__version__, ", ".join(KUBERNETES_VERSIONS)))
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(KubernetesManifestsTest)
    test_ids = [t.id() for t in suite]
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        write_junit(os.environ["XML_OUTPUT_FILE"], test_ids, result)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
