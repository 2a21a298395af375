"""The web dashboard (issue 16 item 3) in a real browser: headless Chromium (Debian's, installed
by tools/setup.sh) loads the pages of a live cluster (a real coordinator with --dashboard_listen,
two real worker daemons, a real W = 4 HYBRID_SHARD S = 2 job) and the test checks what the pages
show after their scripts ran: the job in the list, the loss curve with one point per stored
series point, the placement as two nodes each holding its shard group, the events, checkpoints
and log tail, the workers; a log line holding markup stays text; a wrong token gets 401 and a
user who does not own the job sees no series. Signing in through the /login form in a browser
driven over the DevTools protocol (--remote-debugging-pipe) leaves one cookie, HttpOnly and
SameSite=Strict, holding a session id and never the token; the Sign out button ends the session,
so the cookie copied before it is refused after. One cluster and one job for the whole file.

Screenshots of the pages are kept as test outputs ($TEST_UNDECLARED_OUTPUTS_DIR).
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CORPUS = os.path.abspath(os.environ.get("SHARDLINE_CORPUS", "data/tinyshakespeare.txt"))
STEPS = 12
EVAL_EVERY = 4
# The sample prompt is markup: the trainer logs its sample (prompt included) and the job status
# carries it, so both the log tail and the summary must show it as text.
HOSTILE = '<img src=x id=injected onerror=alert(1)>'
# Rank 1 pauses before the final sample: the job is RUNNING, all steps but the sample's done.
PAUSE_S = 20
ALICE = "alice-dashboard-token-0123456789"
BOB = "bob-dashboard-token-0123456789"
JOIN = "join-dashboard-token-0123456789"


def write_private(path, text):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise unittest.SkipTest("no chromium: run tools/setup.sh")


class Element:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    def classes(self):
        return (self.attrs.get("class") or "").split()

    def find_all(self, pred):
        out = []
        for c in self.children:
            if pred(c):
                out.append(c)
            out.extend(c.find_all(pred))
        return out

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)


class Dom(html.parser.HTMLParser):
    """The element tree of a --dump-dom output (enough for ids, classes and text)."""
    VOID = {"meta", "link", "br", "img", "input", "hr", "source", "area", "base", "col", "embed",
            "param", "track", "wbr"}

    def __init__(self, text):
        super().__init__()
        self.root = Element("#root", [], None)
        self.cur = self.root
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs, self.cur)
        self.cur.children.append(e)
        if tag not in self.VOID:
            self.cur = e

    def handle_endtag(self, tag):
        e = self.cur
        while e is not self.root and e.tag != tag:
            e = e.parent
        if e is not self.root:
            self.cur = e.parent

    def handle_data(self, data):
        self.cur.text += data

    def by_id(self, id_):
        found = self.root.find_all(lambda e: e.attrs.get("id") == id_)
        return found[0] if found else None

    def by_class(self, cls, under=None):
        return (under or self.root).find_all(lambda e: cls in e.classes())


class DevTools:
    """Headless Chromium driven over --remote-debugging-pipe (it reads JSON commands, each ended
    by a NUL byte, on fd 3 and writes answers and events on fd 4): enough to fill in a form,
    click, and read the browser's own cookie jar."""

    def __init__(self, binary, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        # The shell puts the pipes on fds 3 and 4 (a preexec dup2 would be closed again).
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", "--user-data-dir=" + profile,
                "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(
            ["sh", "-c", 'exec "$@" 3<&%d 4>&%d' % (to_chrome_r, from_chrome_w), "sh"] + args,
            pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id, self.buf = 0, b""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]

    def call(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_chrome, 1 << 16)
                if not chunk:
                    raise AssertionError("chromium closed the DevTools pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise AssertionError("%s: %s" % (method, answer["error"]))
                return answer["result"]

    def js(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                      self.session)
        return r["result"].get("value")

    def wait_js(self, expression, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.js(expression):
                return
            time.sleep(0.2)
        raise AssertionError("never true: %s (at %s)" % (expression, self.js("location.href")))

    def navigate(self, url):
        self.call("Page.navigate", {"url": url}, self.session)
        self.wait_js("document.readyState === 'complete' && location.href === %s" %
                     json.dumps(url))

    def cookies(self):
        return self.call("Storage.getCookies")["cookies"]

    def close(self):
        try:
            self.call("Browser.close")
        except AssertionError:
            pass
        self.proc.wait(timeout=30)
        os.close(self.to_chrome)
        os.close(self.from_chrome)


class DashboardBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.chromium = chromium()
        tmp = tempfile.mkdtemp(prefix="dash_", dir=os.environ.get("TEST_TMPDIR"))
        cls.tmp = tmp
        users = os.path.join(tmp, "users")
        join = os.path.join(tmp, "join.token")
        write_private(users, "alice %s\nbob %s\n" % (ALICE, BOB))
        write_private(join, JOIN + "\n")
        cls.saved = {k: os.environ.get(k) for k in ("SHARDLINE_TOKEN", "SHARDLINE_JOIN_TOKEN")}
        os.environ["SHARDLINE_TOKEN"] = ALICE  # shardctl: alice submits
        os.environ["SHARDLINE_JOIN_TOKEN"] = JOIN
        cls.out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", tmp)
        cls.cluster = harness.Cluster(
            workers=0, coordinator_flags=[
                "--users_file=" + users, "--worker_token_file=" + join,
                "--dashboard_listen=127.0.0.1:0", "--metrics_flush_ms=500",
                # Pages of 2 jobs: the job list must follow /api/jobs' pages.
                "--max_list_page_size=2",
                # A cluster that will grow: the 8-rank jobs below are taken, and wait.
                "--max_world_size=8"])
        for i in range(2):
            cls.cluster.start_worker(i, 2, env={"SHARDLINE_TEST_PAUSE_IN_SAMPLE": "1:%d" % PAUSE_S})
        cls.cluster.wait_for_workers(2)
        log = open(os.path.join(cls.cluster.dir, "coordinator.log")).read()
        cls.base = re.search(r"dashboard on (http://\S+/)", log).group(1)
        cls.job = cls.submit()
        # While rank 1 pauses before the final sample the job is RUNNING with its steps done.
        cls.cluster.wait_for(cls.job, lambda s: s.get("state") == "RUNNING" and
                             int(s.get("step", 0)) >= STEPS - 1, timeout=240, what="last steps")
        # The placement stays while the attempt runs; the page is read within the pause.
        cls.running_status = cls.cluster.job(cls.job)
        cls.running_dom = cls.load("job?id=" + cls.job, ALICE, "job-running", budget_ms=3000)
        status = cls.cluster.wait_for(cls.job, lambda s: s.get("state") in
                                      ("SUCCEEDED", "FAILED"), timeout=240, what="job end")
        assert status["state"] == "SUCCEEDED", json.dumps(status, indent=1)[-3000:]
        # The sample, the series and the ranks' last log lines reach the coordinator around the
        # end (each on its own path): the pages are read once all three are there.
        cls.cluster.wait_for(cls.job, lambda s: s.get("sample"), timeout=60, what="the sample")
        deadline = time.time() + 60
        while time.time() < deadline:
            points = cls.api_as(ALICE, "api/jobs/%s/metrics" % cls.job)["points"]
            lines = cls.api_as(ALICE, "api/jobs/%s/logs" % cls.job).get("lines", [])
            if (len(points) == STEPS and any(HOSTILE in ln.get("text", "") for ln in lines)
                    and any(ln.get("rank") == 1 for ln in lines)):
                break
            time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        for k, v in cls.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        cls.cluster.stop()
        print(cls.cluster.logs())

    @classmethod
    def submit(cls):
        spec = f"""
name: dashboard-demo
world_size: 4
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {CORPUS}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.0003, warmup_steps: 2}}
fsdp: {{sharding_strategy: HYBRID_SHARD, hybrid_shard_degree: 2, collective_timeout_s: 60}}
train: {{steps: {STEPS}, global_batch_size: 8, micro_batch_size: 2, log_every: 1,
        eval_every: {EVAL_EVERY}, eval_batches: 1, seed: 5, deterministic: true,
        sample_tokens: 8, sample_prompt: {json.dumps(HOSTILE)}}}
device: {{kind: CPU, cpu_threads: 1}}
checkpoint: {{dir: {os.path.join(cls.cluster.dir, "checkpoints")}, every_steps: 6, keep_last: 2,
             save_final: true}}
fault_tolerance: {{mode: REPLICA_GROUPS, min_replicas: 1}}
"""
        path = os.path.join(cls.tmp, "job.yaml")
        with open(path, "w") as f:
            f.write(spec)
        return cls.cluster.shardctl("submit", path).stdout.split()[0]

    @classmethod
    def browse(cls, path, token, shot, budget_ms=4000, profile=None):
        """Opens base+path (with ?token= when given) in headless Chromium; returns the DOM after
        the page's scripts ran for budget_ms of virtual time, and keeps a screenshot."""
        url = cls.base + path
        if token is not None:
            url += ("&" if "?" in url else "?") + "token=" + token
        profile = profile or os.path.join(cls.tmp, "profile-" + shot)
        common = [cls.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                  "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars",
                  "--user-data-dir=" + profile, "--virtual-time-budget=%d" % budget_ms]
        dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True,
                             timeout=120)
        if dom.returncode != 0:
            raise AssertionError("chromium exited %d: %s" % (dom.returncode, dom.stderr[-2000:]))
        subprocess.run(common + ["--window-size=1280,2000",
                                 "--screenshot=" + os.path.join(cls.out_dir, shot + ".png"), url],
                       capture_output=True, text=True, timeout=120)
        with open(os.path.join(cls.out_dir, shot + ".html"), "w") as f:
            f.write(dom.stdout)
        return dom.stdout

    @classmethod
    def load(cls, path, token, shot, budget_ms=4000):
        return Dom(cls.browse(path, token, shot, budget_ms))

    @classmethod
    def api_as(cls, token, path):
        req = urllib.request.Request(cls.base + path,
                                     headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def api(self, path, token=ALICE):
        return self.api_as(token, path)

    def test_job_page_draws_the_series_placement_events_checkpoints_and_logs(self):
        dom = self.load("job?id=" + self.job, ALICE, "job")
        metrics = self.api("api/jobs/%s/metrics" % self.job)
        points = metrics["points"]
        self.assertEqual(len(points), STEPS)  # log_every 1: one stored point per step
        loss = dom.by_id("loss-chart")
        self.assertIsNotNone(loss)
        self.assertEqual(int(loss.attrs["data-points"]), len(points))
        self.assertEqual(int(loss.attrs["data-val-points"]),
                         sum(1 for p in points if int(p.get("val_count", 0)) > 0))
        self.assertGreater(int(loss.attrs["data-val-points"]), 0)
        self.assertEqual(int(dom.by_id("throughput-chart").attrs["data-points"]), len(points))
        self.assertIn("%d stored points for %d logged steps" % (STEPS, STEPS),
                      dom.by_id("series-note").all_text())
        # A finished job holds no slots: its placement is gone (the running page drew it).
        self.assertEqual(dom.by_class("node"), [])
        # Events, checkpoints, summary.
        events = dom.by_id("events").all_text()
        for kind in ("SUBMITTED", "SCHEDULED", "SUCCEEDED"):
            self.assertIn(kind, events)
        checkpoint_steps = [int(b.attrs["data-step"]) for b in
                            dom.by_id("checkpoints").find_all(lambda e: e.tag == "button")]
        self.assertIn(STEPS, checkpoint_steps)
        summary = dom.by_id("summary").all_text()
        self.assertIn("SUCCEEDED", summary)
        self.assertIn("%d / %d" % (STEPS, STEPS), summary)
        self.assertIn("HYBRID_SHARD (shard degree 2)", summary)
        # The log tail holds the ranks' lines; markup in them (the sample) stays text.
        logs = dom.by_id("logs").all_text()
        self.assertIn("[attempt 1 rank 0]", logs)
        self.assertIn("[attempt 1 rank 1]", logs)
        self.assertIn(HOSTILE, logs)
        self.assertIn(HOSTILE, summary)  # the sample, in the summary table
        self.assertEqual(dom.root.find_all(lambda e: e.tag == "img"), [])
        self.assertIsNone(dom.by_id("injected"))
        self.assertEqual(dom.by_id("whoami").all_text(), "signed in as alice")

    def test_the_page_showed_the_job_while_it_ran(self):
        dom = self.running_dom
        summary = dom.by_id("summary").all_text()
        self.assertIn("RUNNING", summary)
        points = int(dom.by_id("loss-chart").attrs["data-points"])
        self.assertGreaterEqual(points, 1)
        self.assertLessEqual(points, STEPS)
        # Placement: W = R x S = 2 x 2, node-0 holds shard group 0 (ranks 0, 1) and node-1 shard
        # group 1 (ranks 2, 3), as the job's placement says.
        self.assertIn("W = R \u00d7 S = 2 \u00d7 2 on 2 node(s)",
                      dom.by_id("placement-note").all_text())
        nodes = dom.by_class("node")
        self.assertEqual(len(nodes), 2, [n.all_text() for n in nodes])
        status = self.running_status
        expected = {}
        for p in status["placement"]:
            expected.setdefault(p["node_name"], {}).setdefault(
                int(p.get("shard_group", 0)), []).append(int(p.get("rank", 0)))
        shown = {}
        for n in nodes:
            for g in dom.by_class("shard-group", n):
                ranks = [int(r.attrs["data-rank"]) for r in dom.by_class("rank", g)]
                shown.setdefault(n.attrs["data-node"], {})[int(g.attrs["data-shard-group"])] = ranks
        self.assertEqual({k: {g: sorted(r) for g, r in v.items()} for k, v in expected.items()},
                         shown)
        self.assertEqual(sorted(len(v) for v in shown.values()), [1, 1])  # one group per node
        # Replica-group fault tolerance: both groups train (live), no rank was replaced.
        self.assertEqual([g.attrs["data-replica-state"] for g in dom.by_class("shard-group")],
                         ["live", "live"])
        self.assertEqual({int(r.attrs["data-generation"]) for r in dom.by_class("rank")}, {0})
        self.assertIn("Replica groupstraining now: 0, 1 (membership epoch 0)", summary)

    def test_job_list_shows_the_job_with_its_progress_and_owner(self):
        dom = self.load("", ALICE, "jobs", budget_ms=2500)
        rows = dom.root.find_all(lambda e: e.tag == "tr" and e.attrs.get("data-job") == self.job)
        self.assertEqual(len(rows), 1)
        cells = [c.all_text() for c in rows[0].find_all(lambda e: e.tag == "td")]
        self.assertEqual(cells[0:5], [self.job, "dashboard-demo", "alice", "SUCCEEDED",
                                      "%d / %d" % (STEPS, STEPS)])
        self.assertNotEqual(cells[7], "")  # tokens/s

    def test_job_list_follows_the_pages_to_older_jobs(self):
        # Three newer jobs (wider than the 4 slots: they wait, then are cancelled) put the
        # demo job on the second page of /api/jobs (2 a page, newest first).
        wide = os.path.join(self.tmp, "wide.yaml")
        with open(os.path.join(self.tmp, "job.yaml")) as f:
            text = f.read().replace("world_size: 4", "world_size: 8", 1).replace(
                "global_batch_size: 8", "global_batch_size: 16", 1)
        with open(wide, "w") as f:
            f.write(text.replace("name: dashboard-demo", "name: wide", 1))
        newer = [self.cluster.shardctl("submit", wide).stdout.split()[0] for _ in range(3)]
        try:
            dom = self.load("", ALICE, "jobs-pages", budget_ms=3000)
            shown = {e.attrs.get("data-job") for e in dom.root.find_all(
                lambda e: e.tag == "tr" and e.attrs.get("data-job"))}
            self.assertTrue(set(newer + [self.job]) <= shown, shown)
        finally:
            for job in newer:
                self.cluster.shardctl("cancel", job, check=False)

    def test_workers_page_lists_both_workers(self):
        dom = self.load("workers", ALICE, "workers", budget_ms=2500)
        rows = dom.root.find_all(lambda e: e.tag == "tr" and "data-worker" in e.attrs)
        nodes = sorted(r.find_all(lambda e: e.tag == "td")[1].all_text() for r in rows)
        self.assertEqual(nodes, ["node-0", "node-1"])
        self.assertTrue(all("ALIVE" in r.all_text() for r in rows))

    def test_a_wrong_token_gets_401(self):
        text = self.browse("", "wrong-token", "wrong-token", budget_ms=1000)
        self.assertIn("401 wrong token", text)
        with self.assertRaises(urllib.error.HTTPError) as e:
            self.api("api/jobs", token="wrong-token")
        self.assertEqual(e.exception.code, 401)
        self.assertEqual(json.loads(e.exception.read()), {"error": "wrong token"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(self.base + "api/jobs", timeout=30)
        self.assertEqual(e.exception.code, 401)

    def test_the_login_form_sets_a_session_cookie_without_the_token_and_logout_ends_it(self):
        browser = DevTools(self.chromium, os.path.join(self.tmp, "profile-devtools"))
        try:
            browser.navigate(self.base + "login")
            browser.js("document.getElementById('token').value = %s; "
                       "document.getElementById('signin').click()" % json.dumps(ALICE))
            browser.wait_js("location.pathname === '/' && document.getElementById('whoami')"
                            " && document.getElementById('whoami').textContent === "
                            "'signed in as alice'")
            cookies = browser.cookies()
            self.assertEqual([c["name"] for c in cookies], ["shardline_session"], cookies)
            cookie = cookies[0]
            self.assertTrue(cookie["httpOnly"])
            self.assertEqual(cookie["sameSite"], "Strict")
            self.assertEqual(cookie["path"], "/")
            self.assertTrue(cookie["session"])  # no Max-Age: gone when the browser closes
            self.assertRegex(cookie["value"], "^[0-9a-f]{64}$")
            self.assertNotIn(ALICE, json.dumps(cookies))
            self.assertEqual(browser.js("document.cookie"), "")  # page scripts cannot read it
            self.assertNotIn(ALICE, browser.js("document.documentElement.outerHTML"))
            stolen = cookie["value"]
            self.assertEqual(self.with_cookie(stolen), {"user": "alice", "admin": False})
            browser.js("document.getElementById('signout').click()")
            browser.wait_js("location.pathname === '/login' && document.readyState === "
                            "'complete'")
            self.assertEqual(browser.cookies(), [])
        finally:
            browser.close()
        with self.assertRaises(urllib.error.HTTPError) as e:
            self.with_cookie(stolen)  # the copied cookie, after logout
        self.assertEqual(e.exception.code, 401)
        self.assertIn("no such session", json.loads(e.exception.read())["error"])

    def with_cookie(self, session):
        req = urllib.request.Request(self.base + "api/whoami",
                                     headers={"Cookie": "shardline_session=" + session})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def test_another_user_sees_the_job_but_not_its_series_or_logs(self):
        dom = self.load("job?id=" + self.job, BOB, "job-as-bob", budget_ms=2500)
        self.assertIn("SUCCEEDED", dom.by_id("summary").all_text())
        self.assertIn("only the job's owner or an admin", dom.by_id("error").all_text())
        self.assertEqual(dom.by_id("logs").all_text(), "")
        self.assertNotIn("data-points", dom.by_id("loss-chart").attrs)
        with self.assertRaises(urllib.error.HTTPError) as e:
            self.api("api/jobs/%s/logs" % self.job, token=BOB)
        self.assertEqual(e.exception.code, 403)


if __name__ == "__main__":
    harness.run_tests(__name__)
