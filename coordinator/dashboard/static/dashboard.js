// The dashboard's pages: each polls its JSON documents (/api/..., coordinator/dashboard/json_api.h)
// every POLL_MS and redraws. Every value from the coordinator goes into the page as text
// (textContent, never innerHTML): job names, log lines and event messages are user-controlled.
"use strict";

const POLL_MS = 2000;
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

// ---- helpers
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function num(v) {  // proto3 JSON: int64 as strings, NaN as "NaN"
  if (v === undefined || v === null || v === "") return 0;
  return Number(v);
}

function fmtTime(ms) {
  ms = num(ms);
  return ms > 0 ? new Date(ms).toLocaleString() : "";
}

function fmtDuration(s) {
  s = Math.round(num(s));
  if (!(s > 0)) return "";
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + r + "s";
}

function fmtNumber(v, digits) {
  v = num(v);
  return Number.isFinite(v) && v !== 0 ? v.toFixed(digits) : "";
}

function fmtBytes(b) {
  b = num(b);
  if (!(b > 0)) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; ++i; }
  return b.toFixed(i ? 1 : 0) + " " + units[i];
}

function showError(message) {
  const e = document.getElementById("error");
  e.textContent = message || "";
  e.hidden = !message;
}

// GET a JSON document; throws Error(message) for an HTTP error (the server's {"error": ...}).
async function api(path) {
  const res = await fetch(path, {credentials: "same-origin", cache: "no-store"});
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (!res.ok) {
    const err = new Error((body && body.error) || res.status + " " + res.statusText);
    err.status = res.status;
    throw err;
  }
  return body;
}

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function touch() {
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
}

// The signed-in user ({user, admin}); null when unknown.
let mePromise = null;

function whoami() {
  mePromise = api("/api/whoami").then(me => {
    document.getElementById("whoami").textContent =
        "signed in as " + me.user + (me.admin ? " (admin)" : "");
    return me;
  }, e => {
    showError(e.message);
    return null;
  });
}

// Calls `step` now and every POLL_MS until it returns false.
function poll(step) {
  const run = async () => {
    let again = true;
    try {
      again = await step();
      touch();
    } catch (e) {
      showError(e.message);
      again = e.status !== 401;
    }
    if (again !== false) setTimeout(run, POLL_MS);
  };
  run();
}

// ---- job list
function jobsPage() {
  const mine = document.getElementById("mine");
  let me = null, jobs = [];
  const draw = () => {
    const rows = jobs.filter(j => !mine.checked || j.owner === me.user).map(j => {
      const link = el("a", {href: "/job?id=" + encodeURIComponent(j.job_id)}, j.job_id);
      const total = num(j.total_steps);
      const progress = total > 0 ? num(j.step) + " / " + total : String(num(j.step));
      return el("tr", {"data-job": j.job_id},
                el("td", {}, link), el("td", {class: "job-name"}, (j.spec && j.spec.name) || ""),
                el("td", {}, j.owner || ""), el("td", {class: "state-" + j.state}, j.state),
                el("td", {class: "progress"}, progress),
                el("td", {}, TERMINAL.has(j.state) ? "" : fmtDuration(j.eta_s)),
                el("td", {}, fmtNumber(j.loss, 4)), el("td", {}, fmtNumber(j.tokens_per_s, 0)),
                el("td", {}, num(j.attempt)), el("td", {}, num(j.world_size)));
    });
    replaceRows(document.querySelector("#jobs tbody"), rows);
  };
  mine.addEventListener("change", () => { if (me !== null) draw(); });
  poll(async () => {
    if (me === null) {
      me = (await mePromise) || {user: "", admin: true};
      mine.checked = !me.admin;  // users start with their own jobs, admins with all
    }
    // /api/jobs pages (newest first, --max_list_page_size a page): follow them, at most 20.
    let all = [], token = "";
    for (let page = 0; page < 20; ++page) {
      const doc = await api("/api/jobs" + (token ? "?page_token=" + encodeURIComponent(token) : ""));
      all = all.concat(doc.jobs || []);
      token = doc.next_page_token || "";
      if (!token) break;
    }
    showError("");
    jobs = all;
    draw();
  });
}

// ---- workers
function workersPage() {
  poll(async () => {
    const doc = await api("/api/workers");
    showError("");
    const rows = (doc.workers || []).map(w => {
      const labels = Object.entries(w.labels || {}).map(([k, v]) => k + "=" + v).join(", ");
      return el("tr", {"data-worker": w.worker_id}, el("td", {}, w.worker_id),
                el("td", {}, w.node_name), el("td", {}, w.address),
                el("td", {class: "state-" + w.state}, w.state), el("td", {}, (w.slots || []).length),
                el("td", {}, num(w.busy_slots)), el("td", {}, fmtTime(w.last_heartbeat_unix_ms)),
                el("td", {}, labels));
    });
    replaceRows(document.querySelector("#workers tbody"), rows);
  });
}

// ---- one job
function makeChart(canvas, title, datasets, yTitle) {
  return new Chart(canvas, {
    type: "line",
    data: {datasets: datasets.map(d => ({label: d.label, data: [], borderColor: d.color,
                                         backgroundColor: d.color, pointRadius: 2,
                                         borderWidth: 1.5, spanGaps: true}))},
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      plugins: {title: {display: true, text: title}},
      scales: {x: {type: "linear", title: {display: true, text: "step"}},
               y: {title: {display: true, text: yTitle}}},
    },
  });
}

function drawSummary(st) {
  const spec = st.spec || {};
  const fsdp = spec.fsdp || {};
  const total = num(st.total_steps);
  const rows = [
    ["State", st.state + (st.message ? ": " + st.message : "")],
    ["Owner", st.owner || ""],
    ["Progress", total > 0 ? num(st.step) + " / " + total : String(num(st.step))],
    ["ETA", TERMINAL.has(st.state) ? "" : fmtDuration(st.eta_s)],
    ["Loss / val loss", fmtNumber(st.loss, 4) + " / " + fmtNumber(st.val_loss, 4)],
    ["Tokens/s", fmtNumber(st.tokens_per_s, 0)],
    ["Attempt", String(num(st.attempt))],
    ["World size", String(num(st.world_size))],
    ["Sharding", (fsdp.sharding_strategy || "") +
                 (num(fsdp.hybrid_shard_degree) ? " (shard degree " + num(fsdp.hybrid_shard_degree) + ")" : "")],
    ["Latest checkpoint", num(st.latest_checkpoint_step) ? String(num(st.latest_checkpoint_step)) : ""],
    ...(liveGroups(st) ? [["Replica groups", "training now: " + liveGroups(st).join(", ") +
                           " (membership epoch " + num(st.membership_epoch) + ")"]] : []),
    ["Submitted", fmtTime(st.submitted_unix_ms)],
    ["Started", fmtTime(st.started_unix_ms)],
    ["Finished", fmtTime(st.finished_unix_ms)],
    ["Sample", st.sample || ""],
  ];
  replaceRows(document.querySelector("#summary tbody"),
              rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
}

// fault_tolerance REPLICA_GROUPS: the replica (shard) groups of the current membership, which
// train now; null for a job without it.
function liveGroups(st) {
  const live = st.live_replica_groups;
  return Array.isArray(live) && live.length > 0 ? live.map(num) : null;
}

// Nodes (workers) holding their shard groups: W = R x S, a shard group is one replica (S ranks
// sharding the parameters); a replicate group holds the ranks of one shard index across groups.
// With replica-group fault tolerance each group says whether it trains now (live) or is out of
// the membership (lost, or its replacement not rejoined yet), and a replacement rank its
// generation.
function drawPlacement(st) {
  const placement = st.placement || [];
  const live = liveGroups(st);
  const nodes = new Map();
  for (const p of placement) {
    const key = p.node_name + " (" + p.worker_id + ")";
    if (!nodes.has(key)) nodes.set(key, new Map());
    const groups = nodes.get(key);
    const g = num(p.shard_group);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(p);
  }
  const shardGroups = new Set(placement.map(p => num(p.shard_group)));
  const s = placement.length && shardGroups.size ? placement.length / shardGroups.size : 0;
  document.getElementById("placement-note").textContent = placement.length
      ? "W = R \u00d7 S = " + shardGroups.size + " \u00d7 " + s + " on " + nodes.size +
            " node(s); colour: replicate group (ranks holding the same shard)"
      : "no ranks placed (the job is not running)";
  const boxes = [];
  for (const [node, groups] of [...nodes.entries()].sort()) {
    const groupBoxes = [...groups.entries()].sort((a, b) => a[0] - b[0]).map(([g, ranks]) => {
      ranks.sort((a, b) => num(a.rank) - num(b.rank));
      const state = live === null ? "" : live.includes(g) ? "live" : "out";
      const title = "shard group " + g + (state === "live" ? " \u00b7 live" :
          state === "out" ? " \u00b7 out of the membership (lost or rejoining)" : "");
      return el("div", {class: "shard-group" + (state === "out" ? " out" : ""),
                        "data-shard-group": g, "data-replica-state": state},
                el("div", {class: "shard-group-title"}, title),
                ...ranks.map(r => el("span", {class: "rank replica-" + (num(r.replicate_group) % 6),
                                             "data-rank": num(r.rank),
                                             "data-generation": num(r.generation)},
                                     "rank " + num(r.rank) + " \u00b7 slot " + num(r.slot_index) +
                                         " \u00b7 replicate group " + num(r.replicate_group) +
                                         (num(r.generation) > 0
                                              ? " \u00b7 generation " + num(r.generation) : ""))));
    });
    boxes.push(el("div", {class: "node", "data-node": node.split(" ")[0]},
                  el("div", {class: "node-title"}, node), ...groupBoxes));
  }
  document.getElementById("placement").replaceChildren(...boxes);
}

function drawEvents(st) {
  const rows = (st.events || []).map(e => el("tr", {}, el("td", {}, fmtTime(e.time_unix_ms)),
                                              el("td", {}, num(e.attempt)), el("td", {}, e.kind),
                                              el("td", {}, e.message || "")));
  replaceRows(document.querySelector("#events tbody"), rows);
}

function drawCheckpoints(jobId, doc) {
  const rows = (doc.checkpoints || []).map(c => {
    const button = el("button", {type: "button", "data-step": num(c.step)}, "show");
    button.addEventListener("click", async () => {
      const pre = document.getElementById("manifest");
      try {
        const m = await api("/api/jobs/" + encodeURIComponent(jobId) + "/checkpoints/" + num(c.step));
        pre.textContent = JSON.stringify(m, null, 1);
      } catch (e) {
        pre.textContent = e.message;
      }
      pre.hidden = false;
    });
    return el("tr", {}, el("td", {}, num(c.step)), el("td", {}, c.committed ? "yes" : "no"),
              el("td", {}, fmtTime(c.created_unix_ms)), el("td", {}, fmtBytes(c.size_bytes)),
              el("td", {}, num(c.world_size)),
              el("td", {}, (c.sharding_strategy || "") + (num(c.shard_degree) ? " S=" + num(c.shard_degree) : "")),
              el("td", {}, c.path), el("td", {}, button));
  });
  replaceRows(document.querySelector("#checkpoints tbody"), rows);
}

function jobPage() {
  const jobId = new URLSearchParams(location.search).get("id") || "";
  const enc = encodeURIComponent(jobId);
  document.getElementById("job-id").textContent = jobId;
  const haveCharts = typeof Chart !== "undefined";
  document.getElementById("charts-missing").hidden = haveCharts;
  let lossChart = null, throughputChart = null;
  if (haveCharts) {
    lossChart = makeChart(document.getElementById("loss-chart"), "Loss",
                          [{label: "loss", color: "#1f77b4"}, {label: "val loss", color: "#d62728"}],
                          "loss");
    throughputChart = makeChart(document.getElementById("throughput-chart"), "Throughput",
                                [{label: "tokens/s", color: "#2ca02c"}], "tokens/s");
  }
  const logs = document.getElementById("logs");
  let nextSeq = 0, finalRound = false;

  poll(async () => {
    const doc = await api("/api/jobs/" + enc);
    const st = doc.status;
    showError(doc.may_read ? "" : "only the job's owner or an admin may read its series, logs and checkpoints");
    document.title = "Shardline: " + st.job_id;
    document.getElementById("job-name").textContent = (st.spec && st.spec.name) || "";
    drawSummary(st);
    drawPlacement(st);
    drawEvents(st);
    if (doc.may_read) {
      const [metrics, checkpoints, newLogs] = await Promise.all([
        api("/api/jobs/" + enc + "/metrics"), api("/api/jobs/" + enc + "/checkpoints"),
        api("/api/jobs/" + enc + "/logs?tail=200&after_seq=" + nextSeq)]);
      const points = metrics.points || [];
      const series = (f) => points.map(p => ({x: num(p.step), y: num(p[f])}));
      const val = points.filter(p => num(p.val_count) > 0).map(p => ({x: num(p.step), y: num(p.val_loss)}));
      document.getElementById("series-note").textContent =
          points.length + " stored points for " + num(metrics.reported_steps) +
          " logged steps (a point holds " + Math.max(1, num(metrics.stride)) + " step(s))";
      if (haveCharts) {
        lossChart.data.datasets[0].data = series("loss");
        lossChart.data.datasets[1].data = val;
        throughputChart.data.datasets[0].data = series("tokens_per_s");
        lossChart.update("none");
        throughputChart.update("none");
      }
      const lossCanvas = document.getElementById("loss-chart");
      lossCanvas.setAttribute("data-points", haveCharts ? lossChart.data.datasets[0].data.length : 0);
      lossCanvas.setAttribute("data-val-points", haveCharts ? lossChart.data.datasets[1].data.length : 0);
      document.getElementById("throughput-chart").setAttribute(
          "data-points", haveCharts ? throughputChart.data.datasets[0].data.length : 0);
      drawCheckpoints(jobId, checkpoints);
      for (const l of newLogs.lines || []) {
        logs.append(document.createTextNode("[attempt " + num(l.attempt) + " rank " + num(l.rank) + "] " +
                                            l.text + "\n"));
      }
      while (logs.childNodes.length > 1000) logs.removeChild(logs.firstChild);
      if ((newLogs.lines || []).length) logs.scrollTop = logs.scrollHeight;
      nextSeq = num(newLogs.next_seq);
    }
    // A finished job is drawn once more (late log lines), then the page stops polling.
    if (TERMINAL.has(st.state)) {
      if (finalRound) return false;
      finalRound = true;
    }
    return true;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  whoami();
  const page = document.body.dataset.page;
  if (page === "jobs") jobsPage();
  else if (page === "workers") workersPage();
  else if (page === "job") jobPage();
});
