// kvd console: polls this node's /v1/stats once a second and draws what it
// finds. Everything from the server is written with textContent or drawn on a
// canvas, never parsed as HTML.
"use strict";

const POLL_MS = 1000;
// A node that accepts the connection but does not answer (stalled, or
// behind a partition that drops packets) would hold a fetch for minutes,
// with the page still showing its last good state: give up after this.
const STATS_TIMEOUT_MS = 5000;
const POINTS = 120; // two minutes of history

const $ = (id) => document.getElementById(id);
const series = { memcache: [], http: [], applied: [], latency: [] };
let prev = null;      // previous /v1/stats sample
let lastLeader = null;

function setText(id, v) { $(id).textContent = String(v); }

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function push(arr, v) {
  arr.push(v);
  if (arr.length > POINTS) arr.shift();
}

function memberLabel(cluster, id) {
  if (!id) return "none";
  const m = (cluster.members || []).find((x) => x.id === id);
  return m && m.name ? m.name + " (" + id + ")" : id;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === "" ? "–" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
}

// The table is rebuilt only when what it shows changes: rebuilding it on every
// poll replaced a button between a user's mouse-down and mouse-up, and the
// click was lost.
let membersShown = "";

function renderMembers(cluster) {
  const body = $("members").querySelector("tbody");
  const shown = JSON.stringify([cluster.leader || "", (cluster.members || []).map((m) =>
    [m.self, m.id, m.name, m.kind, m.witness, m.role, m.health, m.http_addr, m.memcache_addr])]);
  if (shown === membersShown) return;
  membersShown = shown;
  const rows = [];
  for (const m of cluster.members || []) {
    const tr = document.createElement("tr");
    if (m.self) tr.className = "self";
    cell(tr, m.id);
    cell(tr, m.name);
    // A witness votes but holds no data: say so where the kind is shown.
    cell(tr, m.witness ? m.kind + " (witness)" : m.kind);
    cell(tr, m.role);
    cell(tr, m.health, ["healthy", "unhealthy"].includes(m.health) ? m.health : "unknown");
    cell(tr, m.http_addr);
    cell(tr, m.memcache_addr);
    tr.appendChild(actionsCell(cluster, m));
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

// Member actions. The endpoints take the member's name, so a member whose
// name this node does not know gets no buttons.
function button(text, cls, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (cls) b.className = cls;
  b.addEventListener("click", onClick);
  return b;
}

function actionsCell(cluster, m) {
  const td = document.createElement("td");
  td.className = "actions";
  if (!m.name) {
    td.textContent = "–";
    return td;
  }
  if (m.kind === "voter" && !m.witness && m.id !== cluster.leader) {
    td.appendChild(button("Make leader", "transfer", () => confirmAction({
      title: "Transfer leadership to " + m.name + "?",
      text: "The leader hands over to " + m.name + " (" + m.id + "). Writes pause for about one round trip.",
      method: "POST", url: () => "/v1/cluster/transfer-leader", body: { to: m.name },
      done: "Leadership transferred to " + m.name + ".",
    })));
  }
  td.appendChild(button("Remove", "remove danger", () => confirmAction({
    title: "Remove " + m.name + " from the cluster?",
    text: "Member " + m.name + " (" + m.id + ") leaves the raft configuration and stops receiving writes." +
      (m.self ? " This is the node serving this console." : ""),
    force: true,
    method: "DELETE",
    url: (force) => "/v1/cluster/members/" + encodeURIComponent(m.name) + (force ? "?force=true" : ""),
    done: m.name + " removed.",
  })));
  return td;
}

let pendingAction = null;

function confirmAction(a) {
  pendingAction = a;
  setText("confirm-title", a.title);
  setText("confirm-text", a.text);
  $("confirm-force-row").hidden = !a.force;
  $("confirm-force").checked = false;
  $("confirm-error").textContent = "";
  $("confirm-ok").disabled = false;
  $("confirm").showModal();
}

async function runAction() {
  // The dialog's own state says whether an action is awaiting confirmation.
  // A "close" listener that cleared pendingAction raced with a dialog
  // reopened right after a cancel: the queued close event of the first
  // dialog wiped the second one's action, and Confirm did nothing.
  //
  // The dialog can be closed (Escape, Cancel) while the request is in
  // flight, and another action opened in it: the reply then belongs to an
  // action the dialog no longer shows. It must not close that dialog, drop
  // its action or put its error there, and a failure goes to the message
  // line rather than into a dialog nobody sees.
  const a = pendingAction;
  if (!a || !$("confirm").open) return;
  const ok = $("confirm-ok");
  ok.disabled = true;
  try {
    const init = { method: a.method, cache: "no-store" };
    if (a.body !== undefined) {
      init.headers = { "Content-Type": "application/json" };
      init.body = JSON.stringify(a.body);
    }
    const resp = await fetch(a.url($("confirm-force").checked), init);
    let data = null;
    try { data = await resp.json(); } catch (_) { /* not JSON: report the status */ }
    if (!resp.ok) {
      const msg = data && typeof data.error === "string" ? data.error : "";
      throw new Error(msg ? msg + " (HTTP " + resp.status + ")" : "HTTP " + resp.status);
    }
    if (pendingAction === a) {
      pendingAction = null;
      $("confirm").close();
    }
    showMessage(a.done, "ok");
  } catch (e) {
    if (pendingAction === a && $("confirm").open) {
      $("confirm-error").textContent = e.message;
      ok.disabled = false;
    } else {
      showMessage(a.title.replace(/\?$/, "") + " failed: " + e.message, "bad");
    }
  }
}

function showMessage(text, cls) {
  const el = $("actionmsg");
  el.textContent = text;
  el.className = "small " + cls;
}

function initActions() {
  $("confirm-ok").addEventListener("click", runAction);
  $("transfer-any").addEventListener("click", () => confirmAction({
    title: "Transfer leadership?",
    text: "The leader hands over to the member the server picks (the most caught-up follower). Writes pause for about one round trip.",
    method: "POST", url: () => "/v1/cluster/transfer-leader", body: { to: "" },
    done: "Leadership transfer requested.",
  }));
}

function logLeader(cluster) {
  const leader = cluster.leader || "";
  if (lastLeader !== null && leader !== lastLeader) {
    const li = document.createElement("li");
    li.textContent = new Date().toLocaleTimeString() + ": " +
      memberLabel(cluster, lastLeader) + " → " + memberLabel(cluster, leader) + " (term " + cluster.term + ")";
    const log = $("leaderlog");
    log.insertBefore(li, log.firstChild);
    while (log.children.length > 20) log.removeChild(log.lastChild);
  }
  lastLeader = leader;
}

// The running totals /v1/stats reports, which the charts difference.
const TOTALS = ["memcache_commands", "http_requests", "http_latency_count", "http_latency_sum_seconds"];

// totalsDelta is what each total counted between two polls. The totals all
// start again at 0 when the node restarts: if any went down, each is taken
// as counted from 0 since (as Prometheus's rate() takes a reset). Clamping
// each difference at 0 instead showed no traffic for that interval, and
// once a count had grown past its old value, the difference of two
// unrelated counts: a wrong rate, and a negative mean latency.
function totalsDelta(t, p) {
  const cur = TOTALS.map((k) => Number(t[k]) || 0);
  const old = TOTALS.map((k) => Number(p[k]) || 0);
  const reset = cur.some((v, i) => v < old[i]);
  const d = {};
  TOTALS.forEach((k, i) => { d[k] = reset ? cur[i] : cur[i] - old[i]; });
  return d;
}

function render(s) {
  const c = s.cluster;
  setText("node", (s.name || c.self) + " · " + (c.members || []).length + " member(s)");
  const conn = $("conn");
  conn.textContent = c.ready ? "ready" : "not ready";
  conn.className = "badge " + (c.ready ? "ok" : "bad");
  setText("leader", memberLabel(c, c.leader));
  setText("term", c.term);
  setText("indexes", c.commit + " / " + c.applied);
  setText("items", s.storage.items.toLocaleString());
  setText("bytes", fmtBytes(s.storage.value_bytes));
  setText("disk", fmtBytes(s.storage.disk_bytes));
  setText("changes", c.leader_changes);
  renderMembers(c);
  logLeader(c);

  if (prev && s.time_ms > prev.time_ms) {
    const dt = (s.time_ms - prev.time_ms) / 1000;
    const d = totalsDelta(s.totals || {}, prev.totals || {});
    push(series.memcache, d.memcache_commands / dt);
    push(series.http, d.http_requests / dt);
    // An index, not a counter: a member rebuilt from a snapshot may go back.
    push(series.applied, Math.max(0, ((c.applied || 0) - (prev.cluster.applied || 0)) / dt));
    const dn = d.http_latency_count, ds = d.http_latency_sum_seconds;
    push(series.latency, dn > 0 ? (ds / dn) * 1000 : 0);
    drawChart($("ops"), [series.memcache, series.http, series.applied]);
    drawChart($("latency"), [series.latency]);
  }
  prev = s;
}

function drawChart(canvas, lines) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 28;
  const css = getComputedStyle(document.documentElement);
  const colors = ["--c0", "--c1", "--c2"].map((v) => css.getPropertyValue(v).trim());
  ctx.clearRect(0, 0, w, h);
  let max = 1;
  for (const l of lines) for (const v of l) max = Math.max(max, v);
  ctx.strokeStyle = css.getPropertyValue("--line").trim();
  ctx.fillStyle = css.getPropertyValue("--muted").trim();
  ctx.font = "11px system-ui, sans-serif";
  for (let i = 0; i <= 2; i++) {
    const y = pad / 2 + ((h - pad) * i) / 2;
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w, y); ctx.stroke();
    const label = (max * (2 - i)) / 2;
    ctx.fillText(label >= 10 ? label.toFixed(0) : label.toFixed(2), 0, y + 4);
  }
  lines.forEach((l, k) => {
    ctx.strokeStyle = colors[k % colors.length];
    ctx.lineWidth = 2;
    ctx.beginPath();
    l.forEach((v, i) => {
      const x = pad + ((w - pad) * (i + POINTS - l.length)) / (POINTS - 1);
      const y = pad / 2 + (h - pad) * (1 - v / max);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  });
  canvas.dataset.points = String(lines[0].length);
  canvas.dataset.last = String(lines.map((l) => l[l.length - 1] || 0));
}

async function poll() {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), STATS_TIMEOUT_MS);
  try {
    const resp = await fetch("/v1/stats", { cache: "no-store", signal: ctl.signal });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    render(await resp.json());
  } catch (e) {
    const conn = $("conn");
    conn.textContent = "unreachable: " + (ctl.signal.aborted ? "no answer in " + STATS_TIMEOUT_MS / 1000 + " s" : e.message);
    conn.className = "badge bad";
  } finally {
    clearTimeout(timer);
    setTimeout(poll, POLL_MS);
  }
}

initActions();
poll();
