// reservoir dashboard: reads the admin API every 2 s and draws it. No
// framework, no build step. Every value from the API goes into the page as
// text (textContent), never as HTML.
"use strict";

const REFRESH_MS = 2000;
const CLASS_COLORS = {
  outcome_mismatch: "#d62728", allocation_mismatch: "#ff7f0e", shadow_missing: "#9467bd",
  stockout_race: "#8c8c8c", shadow_error: "#e377c2", shadow_timeout: "#bcbd22",
  shadow_panic: "#17becf", shadow_skipped: "#7f7f7f", shadow_late: "#c7c7c7", authority_error: "#8c564b",
  pre_switch: "#b0a0c8",
};
// What a class that needs a word says on the page.
const CLASS_NOTES = {
  pre_switch: "the reservation may predate its shop's switch (the shadow was not written then): expected, not counted by the shadow_missing gate",
};
const STORE_COLORS = { redis: "#d62728", mysql: "#1f77b4" };
const MISMATCH = ["outcome_mismatch", "allocation_mismatch", "shadow_missing"];

const state = {
  token: "",
  // Compare totals are read since one fixed time, so the numbers only grow
  // and anyone can ask the API for the same ones.
  since: new Date(Math.floor((Date.now() - 3600e3) / 60e3) * 60e3).toISOString(),
  series: {},      // pod -> points, oldest first
  status: null,
  history: [],     // the audit, newest first
  busy: false,
  refreshes: 0,
  reconciler: true,
};

// ---------------------------------------------------------------- helpers

function $(sel, root) { return (root || document).querySelector(sel); }

// el builds an element: attributes (data-*, class, title, ...) and
// children (strings become text nodes).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function pct(x) {
  if (x === undefined || x === null || isNaN(x)) return "–";
  if (x === 0) return "0%";
  if (x < 0.0001) return "<0.01%";
  return (100 * x).toFixed(x < 0.01 ? 2 : 1) + "%";
}
function ms(x) { return x === undefined || x === null ? "–" : (x < 1 ? x.toFixed(2) : x < 10 ? x.toFixed(1) : x.toFixed(0)) + " ms"; }
function nsToMs(ns) { return ns ? ms(ns / 1e6) : "–"; }
function rate(x) { return x === undefined ? "–" : x.toFixed(x < 10 ? 1 : 0); }
function time(t) { return t ? new Date(t).toLocaleTimeString() : "–"; }

// Errors thrown by api() for a refused token: the page already says so.
class TokenError extends Error {}

async function api(method, path, body) {
  const opts = { method, headers: { "Authorization": "Bearer " + state.token, "X-Reservoir-Actor": "dashboard" } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (res.status === 401) {
    showToken(data && data.message, data && data.error);
    throw new TokenError("unauthorized");
  }
  return { status: res.status, data };
}

function toast(msg, bad) {
  const t = $("#toast");
  t.textContent = msg;
  t.className = bad ? "show bad" : "show";
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.className = ""; }, 8000);
}

// ------------------------------------------------------------------ token

// showToken asks for the admin token, and says in the status line why
// nothing is shown: without it the page reads nothing (it used to say
// "loading..." for ever).
function showToken(msg, code) {
  $("#token-box").hidden = false;
  $("#token-error").textContent = msg || "";
  $("#dot").className = "dot bad";
  document.body.dataset.state = code === "admin_disabled" ? "admin-disabled" : msg ? "token-refused" : "no-token";
  $("#updated").textContent = code === "admin_disabled" ? "the admin API is disabled on this server: " + msg
    : msg ? "admin token refused: " + msg + " — paste the right one below"
      : "no admin token: paste it below, or open /dashboard#token=…";
}

function initToken() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    state.token = decodeURIComponent(m[1]);
    sessionStorage.setItem("reservoir-admin-token", state.token);
    // Keep the token off the screen and out of the history.
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    state.token = sessionStorage.getItem("reservoir-admin-token") || "";
  }
  if (!state.token) showToken("");
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("#token").value.trim();
    sessionStorage.setItem("reservoir-admin-token", state.token);
    $("#token-box").hidden = true;
    $("#updated").textContent = "loading…";
    refresh();
  });
}

// ------------------------------------------------------------------ pods

function killText(k) {
  if (!k || k.state === "off") return "off";
  return k.state + (k.actor ? " by " + k.actor : "") + (k.reason ? ": " + k.reason : "");
}

// lagText says a pod's relay lag: "relay lag: 0 changes",
// "relay lag: 12 changes, oldest 40 ms", or why it is unknown.
function lagText(l) {
  if (!l) return "relay lag: –";
  if (l.error) return "relay lag: " + l.error;
  if (!l.changes) return "relay lag: 0 changes";
  return "relay lag: " + l.changes + (l.changes === 1 ? " change" : " changes") + ", oldest " + ms(l.oldest_ms);
}

// handoffText says what a pod's fences say beside its flags: the API's
// line ("fences: handed off 1,204/1,204 shops in 380ms (flags version
// 12)", "fences: 3 of 1,204 shops pending, oldest 2s (flags version 12)").
function handoffText(h) {
  if (!h || !h.line) return "fences: –";
  return "fences: " + h.line;
}

// handoffClass colours it: late while shops are pending or the version
// is not reported yet, bad when unknown or a handoff failed.
function handoffClass(h) {
  if (!h || h.state === "unknown" || (h.report && h.report.failed > 0)) return "bad";
  return h.state === "done" ? "" : "warn";
}

// handoffTitle says who wrote the report and when.
function handoffTitle(h) {
  const r = h && h.report;
  return r ? "reported by " + r.replica + " at " + time(r.updated) + " for flags version " + r.flags_version : "";
}

// lagClass colours a lag: late past 1 s, bad past 5 s (the alert's bound).
function lagClass(l) {
  if (!l || l.error) return "warn";
  if (l.oldest_ms > 5000) return "bad";
  return l.oldest_ms > 1000 ? "warn" : "";
}

function last(points) { return points && points.length ? points[points.length - 1] : null; }

function mismatchRate(p) {
  if (!p || !p.observations_per_sec) return undefined;
  return MISMATCH.reduce((s, c) => s + (p.class_rates[c] || 0), 0);
}

function latencyCell(p, store) {
  const q = p && p.latency[store] && p.latency[store].reserve;
  return q ? ms(q.p50_ms) + " / " + ms(q.p99_ms) : "–";
}

// stateCell is a scope's state in one cell: the store that decides, in a
// few words, and why (the API's state: mode, kill switch and route said
// once, not three ways). The store's badge is neutral for Redis deciding
// as it always has (the legacy state), blue for MySQL, and red only while
// a kill switch holds the mode back.
function stateCell(stv, attrs) {
  const cls = stv.state === "killed" ? "bad" : stv.handoffs && stv.handoffs !== "done" ? "warn" : "";
  return el("td", Object.assign({ "data-field": "state", "data-state": stv.state, "data-handoffs": stv.handoffs || "", class: cls }, attrs || {}),
    el("span", { class: "badge " + stv.decides + (stv.state === "killed" ? " killed" : "") }, stv.decides), " ", el("b", {}, stv.headline),
    el("div", { class: "sub" }, stv.detail));
}

function renderPods(st) {
  const tbody = $("#pods tbody");
  tbody.replaceChildren();
  for (const pod of st.pods) {
    const p = last(state.series[pod.pod]);
    const killed = pod.state.state === "killed";
    tbody.append(el("tr", { "data-pod": pod.pod, class: killed ? "killed" : "" },
      el("td", { "data-field": "pod" }, el("b", {}, pod.pod), el("div", { class: "sub" }, pod.shops.length + " listed shops")),
      stateCell(pod.state),
      el("td", { "data-field": "relay-lag", class: lagClass(pod.relay_lag),
        title: pod.relay_lag && pod.relay_lag.at ? "measured " + time(pod.relay_lag.at) : "" }, lagText(pod.relay_lag)),
      el("td", { "data-field": "handoffs", "data-handoffs": pod.handoffs ? pod.handoffs.state : "", class: handoffClass(pod.handoffs),
        title: handoffTitle(pod.handoffs) }, handoffText(pod.handoffs)),
      el("td", { "data-field": "ops", class: "num" }, rate(p && p.ops_per_sec)),
      el("td", { "data-field": "compared", class: "num" }, rate(p && p.observations_per_sec)),
      el("td", { "data-field": "mismatch", class: "num" }, pct(mismatchRate(p))),
      el("td", { "data-field": "latency-redis", class: "num" }, latencyCell(p, "redis")),
      el("td", { "data-field": "latency-mysql", class: "num" }, latencyCell(p, "mysql")),
      el("td", {},
        el("button", { type: "button", class: "danger small", "data-kill": "pod:" + pod.pod, onclick: () => openKill("pod:" + pod.pod, "engage") }, "Kill switch…"),
        pod.kill.state !== "off" ? el("button", { type: "button", class: "small", "data-release": "pod:" + pod.pod, onclick: () => openKill("pod:" + pod.pod, "release") }, "Release…") : ""),
    ));
  }
  const g = st.global_kill;
  $("#pods-note").textContent = "global mode " + st.global_mode + ", global kill switch " + killText(g) +
    (st.flags_loaded ? "" : " — flags file NOT loaded at this replica: it answers every reservation call 503 flags_unavailable and is not ready") +
    (st.flags_error ? " — flags file invalid (see the banner above)" : "");
  const rel = $("#release-global");
  if (g.state !== "off" && !rel) {
    $("#kill-global").after(el("button", { id: "release-global", type: "button", "data-release": "global", onclick: () => openKill("global", "release") }, "Release global"));
  } else if (g.state === "off" && rel) {
    rel.remove();
  }
  $("#shops-box").hidden = st.shops.length === 0;
  const sb = $("#shops tbody");
  sb.replaceChildren();
  for (const s of st.shops) {
    sb.append(el("tr", { "data-shop": s.shop },
      el("td", {}, String(s.shop)), el("td", {}, s.pod || "–"),
      s.state && s.state.state ? stateCell(s.state) : el("td", { "data-field": "state", class: "bad" }, "no pod serves it"),
      el("td", { "data-field": "own-flags" }, s.own_flags ? [s.mode ? "mode " + s.mode : "", s.kill.state !== "off" ? " kill switch " + killText(s.kill) : ""] : el("span", { class: "sub" }, "none (follows its pod)")),
      el("td", {},
        el("button", { type: "button", class: "danger small", "data-kill": "shop:" + s.shop, onclick: () => openKill("shop:" + s.shop, "engage") }, "Kill switch…"),
        s.kill.state !== "off" ? el("button", { type: "button", class: "small", "data-release": "shop:" + s.shop, onclick: () => openKill("shop:" + s.shop, "release") }, "Release…") : "")));
  }
}

// renderBanner shows, in red above everything, a flags document that this
// replica refused or that cannot be parsed: the error names the line and
// column, and says what is in force meanwhile.
function renderBanner(st) {
  const banner = $("#flags-banner");
  const rej = st.flags_rejected;
  if (!rej && !st.flags_error) {
    banner.hidden = true;
    return;
  }
  if (rej) {
    $("#flags-banner-title").textContent = "Flags document rejected at " + time(rej.at) + ":";
    $("#flags-banner-error").textContent = rej.error;
  } else {
    $("#flags-banner-title").textContent = "Flags document invalid:";
    $("#flags-banner-error").textContent = st.flags_error;
  }
  $("#flags-banner-note").textContent = (rej && !rej.last_valid_in_force) || !st.flags_loaded
    ? "No valid flags are loaded at this replica: it answers every reservation call 503 flags_unavailable. Fix the document (docs/flags.md)."
    : "This replica answers from the last valid flags: no change made since applies. Fix the document (docs/flags.md); the kill switch still works (it writes a valid document built from the last valid flags).";
  banner.hidden = false;
}

// --------------------------------------------------------------- rollout

// renderReplicas lists the live replicas; one behind the newest flags
// version has not obeyed the last change.
function renderReplicas(st) {
  const rs = st.replicas || [];
  const body = $("#replicas tbody");
  body.replaceChildren();
  const newest = rs.reduce((m, r) => Math.max(m, r.applied_version), 0);
  const behind = rs.filter((r) => r.applied_version < newest).length;
  $("#replicas-note").textContent = rs.length === 0
    ? "no replica reports to the control database"
    : rs.length + " live; " + (behind === 0 ? "all at flags version " + newest : behind + " behind flags version " + newest);
  $("#replicas-note").className = behind > 0 ? "bad" : "sub";
  for (const r of rs) {
    const lag = r.applied_version < newest;
    body.append(el("tr", { "data-replica": r.id, class: lag ? "bad" : "" },
      el("td", { class: "mono" }, r.id),
      el("td", {}, (r.pods || []).join(", ")),
      el("td", { "data-field": "version" }, String(r.applied_version) + (lag ? " (behind)" : "")),
      el("td", {}, time(r.applied_at)),
      el("td", {}, nsToMs(r.seen_ago_ns) + " ago")));
  }
}

function renderPlan(st) {
  const box = $("#plan");
  const gates = $("#gates");
  box.replaceChildren();
  if (!st.plan) {
    box.append(el("p", { class: "warn", id: "no-plan" }, st.plan_message || "no rollout plan is configured"));
    gates.hidden = true;
    $("#stage-note").textContent = "";
    return;
  }
  const plan = st.plan;
  const next = plan.next;
  $("#stage-note").textContent = plan.stage < 0 ? "no stage applied yet" : "stage " + plan.stage + " “" + plan.stage_name + "” since " + time(plan.since) +
    (plan.counting_from ? ", gates counting from " + time(plan.counting_from) : "");
  box.append(el("p", {},
    next ? ["next stage: ", el("b", { id: "next-stage" }, next.name), " — ", next.mode, " on ", next.pods.join(", "),
      next.percent ? " (" + next.percent + "% of shops)" : ""] : "the plan is complete",
    " — ", el("span", { id: "ready", class: plan.ready ? "good" : "warn" }, plan.ready ? "gates pass: ready to advance" : "not ready")));
  if (plan.evidence && plan.evidence.pods) {
    box.append(el("p", { class: "sub" }, "evidence on " + plan.evidence.pods.join(", ") + ": " + plan.evidence.observations +
      " observations since " + time(plan.evidence.since) + "; mean latency authority " + nsToMs(plan.evidence.authority_mean_ns) +
      ", shadow " + nsToMs(plan.evidence.shadow_mean_ns)));
  }
  const tb = $("#gates tbody");
  tb.replaceChildren();
  for (const g of plan.gates || []) {
    tb.append(el("tr", { "data-gate": g.gate },
      el("td", {}, g.gate),
      // The verdict as the API and the CLI word it: pass, not yet, breaking.
      el("td", { "data-field": "verdict", class: { pass: "good", breaking: "bad" }[g.verdict] || "warn" }, g.verdict),
      el("td", { "data-field": "value", class: "num" }, fmtGate(g.gate, g.value)),
      el("td", { "data-field": "limit", class: "num" }, fmtGate(g.gate, g.limit)),
      el("td", { class: "sub" }, g.why)));
  }
  gates.hidden = !(plan.gates && plan.gates.length);
  if (gates.hidden && plan.stage < 0) box.append(el("p", { class: "sub" }, "the first stage needs no evidence"));
  if (next) {
    box.append(el("p", {}, el("button", { id: "advance-open", type: "button", onclick: openAdvance }, "Advance to “" + next.name + "”…")));
  }
}

// renderStages lists the plan's stages, the one in force marked.
function renderStages(st) {
  const tb = $("#stages tbody");
  tb.replaceChildren();
  $("#stages").hidden = !st.stages.length;
  for (const g of st.stages) {
    const gates = ["min " + g.gates.min_observations + " observations", "min " + Math.round(g.gates.min_duration_ns / 1e9) + " s"]
      .concat(Object.keys(g.gates.max_rates).sort().map((c) => c + " ≤ " + pct(g.gates.max_rates[c])));
    tb.append(el("tr", { "data-stage": g.index, "data-state": g.state, class: "stage-" + g.state },
      el("td", { class: "num" }, String(g.index)), el("td", {}, el("b", {}, g.name)),
      el("td", {}, g.mode + (g.percent ? " (" + g.percent + "% of shops)" : "")), el("td", {}, g.pods.join(", ")),
      el("td", { "data-field": "state" }, g.state === "current" ? "in force" : g.state), el("td", { class: "sub" }, gates.join("; "))));
  }
}

// renderHistory lists the audit: who changed what, when, why.
function renderHistory() {
  const tb = $("#history tbody");
  tb.replaceChildren();
  if (!state.history.length) {
    tb.append(el("tr", {}, el("td", { colspan: 5, class: "sub" }, "no change audited yet")));
    return;
  }
  for (const e of state.history) {
    tb.append(el("tr", { "data-audit-id": e.id, "data-action": e.action },
      el("td", {}, new Date(e.at).toLocaleString()), el("td", {}, e.actor), el("td", {}, el("b", {}, e.action)),
      el("td", {}, e.scope), el("td", { class: "sub" }, e.reason)));
  }
}

// ------------------------------------------------------------- advance

// The advance control: a dry run shows the flags change and what applying
// it needs; a confirmation applies exactly that (the API refuses it if the
// rollout moved on meanwhile).
const adv = { dry: null };

async function openAdvance() {
  adv.dry = null;
  $("#advance-error").textContent = "";
  $("#advance-step1").hidden = false;
  $("#advance-step2").hidden = true;
  $("#advance-diff").textContent = "asking for the dry run…";
  $("#advance-title").textContent = "Advance the rollout";
  $("#advance-needs").replaceChildren();
  $("#advance-reason").value = "";
  $("#advance-override").checked = false;
  $("#advance-mysql-only").checked = false;
  $("#advance-override-label").hidden = true;
  $("#advance-mysql-only-label").hidden = true;
  $("#advance-dialog").showModal();
  try {
    const r = await api("POST", "/admin/rollout/advance", { dry_run: true });
    if (r.status !== 200) {
      $("#advance-diff").textContent = "";
      $("#advance-error").textContent = (r.data && r.data.message) || "dry run failed: HTTP " + r.status;
      return;
    }
    adv.dry = r.data;
    const d = r.data;
    $("#advance-title").textContent = "Advance to stage " + d.stage.index + ": “" + d.stage.name + "”";
    $("#advance-diff").textContent = d.diff;
    const needs = $("#advance-needs");
    needs.append(el("p", {}, d.stage.mode + " on " + d.stage.pods.join(", ") + (d.stage.percent ? " (" + d.stage.percent + "% of shops)" : "") +
      ". The flags change below is what applying writes (dry run: nothing changed yet)."));
    if (d.blocked.length) {
      needs.append(el("p", { class: "bad", id: "advance-blocked" }, "Needs an override:"), el("ul", {}, d.blocked.map((b) => el("li", {}, b))));
    }
    $("#advance-override-label").hidden = !d.needs.includes("override");
    $("#advance-mysql-only-label").hidden = !d.needs.includes("confirm_mysql_only");
  } catch (e) {
    if (!(e instanceof TokenError)) $("#advance-error").textContent = String(e);
  }
}

function initAdvance() {
  $("#advance-cancel").addEventListener("click", () => $("#advance-dialog").close());
  $("#advance-back").addEventListener("click", () => { $("#advance-step1").hidden = false; $("#advance-step2").hidden = true; });
  $("#advance-continue").addEventListener("click", () => {
    const d = adv.dry;
    if (!d) return;
    const reason = $("#advance-reason").value.trim();
    const override = $("#advance-override").checked;
    if (d.needs.includes("override") && !override) { $("#advance-error").textContent = "A gate fails or a kill switch covers the stage: tick the override to go on anyway."; return; }
    if (override && !reason) { $("#advance-error").textContent = "An override needs a reason (kept in the audit)."; return; }
    if (d.needs.includes("confirm_mysql_only") && !$("#advance-mysql-only").checked) { $("#advance-error").textContent = "Entering mysql_only must be confirmed."; return; }
    $("#advance-error").textContent = "";
    $("#advance-summary").textContent = "Apply stage " + d.stage.index + " “" + d.stage.name + "” (" + d.stage.mode + " on " + d.stage.pods.join(", ") + ")" +
      (override ? " as an OVERRIDE" : "") + "? Every replica applies it within seconds." + (reason ? " Reason: “" + reason + "”" : "");
    $("#advance-step1").hidden = true;
    $("#advance-step2").hidden = false;
    $("#advance-confirm").focus();
  });
  $("#advance-confirm").addEventListener("click", async () => {
    const d = adv.dry;
    const body = { from_stage: d.from_stage, from_version: d.from_version, reason: $("#advance-reason").value.trim(),
      override: $("#advance-override").checked, confirm_mysql_only: $("#advance-mysql-only").checked };
    $("#advance-confirm").disabled = true;
    try {
      const r = await api("POST", "/admin/rollout/advance", body);
      if (r.status === 200) {
        $("#advance-dialog").close();
        toast("stage " + r.data.stage.index + " “" + r.data.stage.name + "” applied" + (r.data.fleet && r.data.fleet.summary ? "; " + r.data.fleet.summary : "") + " (audited)");
        document.body.dataset.lastAdvance = JSON.stringify(r.data);
      } else {
        $("#advance-step1").hidden = false;
        $("#advance-step2").hidden = true;
        $("#advance-error").textContent = (r.data && r.data.message) || ("failed: HTTP " + r.status);
      }
    } catch (e) {
      if (!(e instanceof TokenError)) $("#advance-error").textContent = String(e);
    } finally {
      $("#advance-confirm").disabled = false;
    }
    refresh();
  });
}

function fmtGate(name, v) {
  if (name.startsWith("max_rate") || name === "max_shadow_error_rate") return pct(v);
  if (name === "min_duration") return Math.round(v) + " s";
  if (name === "max_latency_ratio") return v.toFixed(2);
  return String(v);
}

// ---------------------------------------------------------------- charts

const W = 420, H = 120, PAD = 28;

// quantile is the q-quantile of sorted values (nearest rank).
function quantile(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * (sorted.length - 1)))] : 0;
}

// chart draws series over time. The y-scale is clipped at 1.5 times the
// 95th percentile of the values, so one spike cannot flatten the rest: a
// clipped point is drawn as a triangle at the top, and the chart says the
// largest value. opts.marks are audited changes ({t, label}), drawn as
// dashed lines; opts.span is the time range to draw ([from, to]).
function chart(title, series, opts) {
  // series: [{name, color, dash, points: [[t, v], ...]}]
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
  let tmin = Infinity, tmax = -Infinity, vmax = opts.min || 0, peak = 0;
  const values = [];
  for (const s of series) for (const [t, v] of s.points) {
    tmin = Math.min(tmin, t); tmax = Math.max(tmax, t); values.push(v); peak = Math.max(peak, v);
  }
  values.sort((a, b) => a - b);
  // The time axis covers the pod's whole series (opts.span), so a change
  // after the last compared call is still marked, where it happened.
  if (values.length && opts.span) { tmin = Math.min(tmin, opts.span[0]); tmax = Math.max(tmax, opts.span[1]); }
  const cap = Math.max(opts.min || 0, 1.5 * quantile(values, 0.95));
  const clipped = values.length >= 5 && peak > cap;
  vmax = clipped ? cap : Math.max(vmax, peak);
  const fmt = opts.fmt;
  svg.append(svgEl("line", { x1: PAD, y1: H - 14, x2: W, y2: H - 14, class: "axis" }));
  svg.append(svgEl("line", { x1: PAD, y1: 4, x2: PAD, y2: H - 14, class: "axis" }));
  const top = svgEl("text", { x: PAD - 3, y: 12, class: "tick", "text-anchor": "end" });
  top.textContent = fmt(vmax);
  svg.append(top);
  const zero = svgEl("text", { x: PAD - 3, y: H - 14, class: "tick", "text-anchor": "end" });
  zero.textContent = fmt(0);
  svg.append(zero);
  const fig = el("figure", { "data-clipped": clipped ? "1" : "0" }, el("figcaption", {}, title));
  if (isFinite(tmin) && tmax > tmin) {
    const x = (t) => PAD + (W - PAD - 4) * (t - tmin) / (tmax - tmin);
    const y = (v) => (H - 14) - (H - 22) * (vmax ? Math.min(v, vmax) / vmax : 0);
    for (const m of opts.marks || []) {
      if (m.t < tmin || m.t > tmax) continue;
      const g = svgEl("g", { class: "mark", "data-action": m.action });
      g.append(svgEl("line", { x1: x(m.t).toFixed(1), y1: 4, x2: x(m.t).toFixed(1), y2: H - 14 }));
      const label = svgEl("text", { x: (x(m.t) + 2).toFixed(1), y: 10, class: "tick" });
      label.textContent = m.label;
      g.append(label);
      svg.append(g);
    }
    for (const s of series) {
      if (!s.points.length) continue;
      svg.append(svgEl("polyline", { points: s.points.map(([t, v]) => x(t).toFixed(1) + "," + y(v).toFixed(1)).join(" "),
        fill: "none", stroke: s.color, "stroke-width": 1.6, "stroke-dasharray": s.dash ? "3 2" : "none" }));
      for (const [t, v] of s.points) {
        if (v <= vmax) continue;
        const px = x(t);
        svg.append(svgEl("polygon", { class: "clipped", points: `${(px - 3).toFixed(1)},9 ${(px + 3).toFixed(1)},9 ${px.toFixed(1)},4`, fill: s.color }));
      }
    }
    const span = svgEl("text", { x: W - 2, y: H - 2, class: "tick", "text-anchor": "end" });
    span.textContent = "last " + Math.round((tmax - tmin) / 1000) + " s";
    svg.append(span);
  } else {
    const none = svgEl("text", { x: W / 2, y: H / 2, class: "tick", "text-anchor": "middle" });
    none.textContent = opts.empty || "no data yet";
    svg.append(none);
  }
  const legend = el("div", { class: "legend" }, series.filter((s) => s.points.length).map((s) =>
    el("span", {}, el("i", { class: "swatch", "data-color": s.color }), s.name)),
    clipped ? el("span", { class: "warn clip-note" }, "▲ clipped at " + fmt(cap) + "; largest " + fmt(peak)) : "");
  for (const i of legend.querySelectorAll(".swatch")) i.style.background = i.dataset.color;
  fig.append(svg, legend);
  return fig;
}

// marksFor lists the audited changes that cover pod, for its charts: an
// advance (its scope lists the stage's pods), a kill switch or release of
// the pod or of everything. A shop's switch does not mark a pod's chart.
function marksFor(pod) {
  const out = [];
  for (const e of state.history) {
    const scopes = e.scope.split(",");
    if (e.scope === "global" || e.scope === "pod:" + pod || scopes.includes(pod)) {
      out.push({ t: Date.parse(e.at), action: e.action, label: e.action + (e.action === "advance" || e.action === "override" ? " → stage " + e.stage : "") });
    }
  }
  return out;
}

function renderCharts(st) {
  const cc = $("#class-charts");
  const lc = $("#latency");
  cc.replaceChildren();
  lc.replaceChildren();
  for (const pod of st.pods) {
    const pts = state.series[pod.pod] || [];
    const classes = new Set();
    for (const p of pts) for (const c of Object.keys(p.class_rates)) classes.add(c);
    const cs = [...classes].sort().map((c) => ({ name: c, color: CLASS_COLORS[c] || "#333", dash: c === "pre_switch",
      points: pts.filter((p) => p.observations_per_sec > 0).map((p) => [Date.parse(p.at), p.class_rates[c] || 0]) }));
    const anyObs = pts.some((p) => p.observations_per_sec > 0);
    const span = pts.length ? [Date.parse(pts[0].at), Date.parse(pts[pts.length - 1].at)] : null;
    cc.append(chart(pod.pod + (anyObs ? "" : " (not compared: " + pod.state.headline + ")"), cs,
      { fmt: pct, min: 0.001, empty: anyObs ? "no mismatches" : "no compared calls", marks: marksFor(pod.pod), span }));

    const ls = [];
    for (const store of ["redis", "mysql"]) {
      for (const [qname, dash] of [["p99_ms", "p99"], ["p50_ms", "p50"]]) {
        ls.push({ name: store + " reserve " + dash, color: STORE_COLORS[store] + (dash === "p50" ? "88" : ""),
          points: pts.filter((p) => p.latency[store] && p.latency[store].reserve).map((p) => [Date.parse(p.at), p.latency[store].reserve[qname]]) });
      }
    }
    const p = last(pts);
    const table = el("table", { class: "small", "data-pod": pod.pod },
      el("thead", {}, el("tr", {}, el("th", {}, "op"), el("th", {}, "redis p50"), el("th", {}, "redis p99"), el("th", {}, "mysql p50"), el("th", {}, "mysql p99"))),
      el("tbody", {}, ["reserve", "claim", "release"].map((op) => {
        const r = p && p.latency.redis && p.latency.redis[op];
        const m = p && p.latency.mysql && p.latency.mysql[op];
        return el("tr", { "data-op": op }, el("td", {}, op), el("td", { class: "num" }, r ? ms(r.p50_ms) : "–"), el("td", { class: "num" }, r ? ms(r.p99_ms) : "–"),
          el("td", { class: "num" }, m ? ms(m.p50_ms) : "–"), el("td", { class: "num" }, m ? ms(m.p99_ms) : "–"));
      })));
    const fig = chart(pod.pod + " reserve latency", ls, { fmt: (v) => ms(v), min: 1, marks: marksFor(pod.pod), span });
    fig.append(table);
    lc.append(fig);
  }
}

// ----------------------------------------------------------------- stats

function renderStats(st, stats) {
  // The API counts from the start of the stats window that holds the time
  // asked for; the label says that time, not the one asked.
  const counted = (stats.find((s) => s) || {}).since || state.since;
  $("#stats-section").dataset.since = state.since;
  $("#stats-section").dataset.counted = counted;
  $("#stats-note").textContent = "every replica, since " + new Date(counted).toLocaleString() + " (flushed every few seconds; pre_switch is not a mismatch)";
  const tb = $("#stats tbody");
  tb.replaceChildren();
  st.pods.forEach((pod, i) => {
    const s = stats[i];
    if (!s) {
      tb.append(el("tr", { "data-pod": pod.pod }, el("td", {}, pod.pod), el("td", { colspan: 6, class: "bad" }, "stats unavailable")));
      return;
    }
    const live = s.live || {};
    const byClass = live.by_class || {};
    const lat = live.latency || {};
    tb.append(el("tr", { "data-pod": pod.pod },
      el("td", {}, pod.pod),
      el("td", { class: "num", "data-stat": "observations", "data-pod": pod.pod }, String(s.observations)),
      el("td", { class: "num", "data-stat": "match", "data-pod": pod.pod }, String(byClass.match || 0)),
      el("td", { class: "num", "data-stat": "mismatch_rate", "data-pod": pod.pod }, pct(live.mismatch_rate || 0)),
      el("td", { class: "num", "data-stat": "shadow_error_rate", "data-pod": pod.pod }, pct(live.shadow_error_rate || 0)),
      el("td", { class: "sub" }, Object.keys(byClass).filter((c) => c !== "match").sort().map((c) =>
        el("span", { class: "pill", "data-class": c }, c + " " + byClass[c]))),
      el("td", { class: "num" }, nsToMs(lat.authority && lat.authority.mean_ns) + " / " + nsToMs(lat.shadow && lat.shadow.mean_ns))));
  });
}

// ------------------------------------------------------------- reconcile

function renderReconcile(st, recs) {
  const box = $("#reconcile");
  box.replaceChildren();
  if (!state.reconciler) {
    box.append(el("p", { class: "warn", id: "no-reconciler" }, "no reconciler is wired into this server: cross-store drift is not reported here yet"));
    return;
  }
  const table = el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "pod"), el("th", {}, "last run"), el("th", {}, "result"), el("th", {}, ""))));
  const tb = el("tbody");
  st.pods.forEach((pod, i) => {
    const r = recs[i];
    let result = "not run by this replica yet";
    let cls = "sub";
    // A repair (the demo's recovery runs one through this replica) says
    // so: its verdict is what is left after it.
    const repair = !!(r && r.report && r.report.report && r.report.report.repair);
    if (r && r.error) { result = r.error; cls = "bad"; }
    else if (r && r.report) {
      const rep = r.report;
      result = rep.summary !== undefined ? (rep.clean ? "clean" : "DRIFT") + (repair ? " after the repair: " : ": ") + rep.summary : JSON.stringify(rep);
      cls = rep.clean === false ? "bad" : rep.clean === true ? "good" : "";
    }
    tb.append(el("tr", { "data-pod": pod.pod, "data-repair": repair ? "1" : false }, el("td", {}, pod.pod),
      el("td", { "data-field": "at" }, r ? time(r.at) + " (" + r.took_ms.toFixed(0) + " ms" + (repair ? ", a repair" : "") + ")" : "–"),
      el("td", { "data-field": "result", class: cls }, result),
      el("td", {}, el("button", { type: "button", class: "small", onclick: () => runReconcile(pod.pod) }, "Reconcile now"))));
  });
  table.append(tb);
  box.append(table);
}

async function runReconcile(pod) {
  toast("reconciling " + pod + "…");
  try {
    const r = await api("POST", "/admin/reconcile?pod=" + encodeURIComponent(pod));
    toast(r.status === 200 ? "reconciled " + pod : (r.data && r.data.message) || "reconcile failed", r.status !== 200);
  } catch (e) { toast(String(e), true); }
  refresh();
}

// ----------------------------------------------------------------- diffs

function side(o) {
  if (!o) return "";
  const parts = [o.store + ": " + (o.result || (o.skipped ? "skipped" : "error"))];
  if (o.allocations) parts.push(o.allocations.map((a) => a.item + "@" + a.location + "×" + a.quantity).join(" "));
  if (o.short) parts.push("short " + o.short.map((s) => s.item + " (" + s.unheld + "/" + s.requested + ")").join(" "));
  if (o.error) parts.push(o.error);
  if (o.timed_out) parts.push("timed out");
  if (o.panicked) parts.push("panicked");
  parts.push(ms((o.latency_ns || 0) / 1e6));
  return parts.map((p, i) => el("div", { class: i ? "sub" : "" }, p));
}

function renderDiffs(diffs) {
  const tb = $("#diffs tbody");
  tb.replaceChildren();
  if (!diffs.length) {
    tb.append(el("tr", {}, el("td", { colspan: 8, class: "sub" }, "no diff records")));
    return;
  }
  for (const d of diffs) {
    tb.append(el("tr", { "data-diff-id": d.id, "data-class": d.class, class: MISMATCH.includes(d.class) ? "mismatch" : d.class === "pre_switch" ? "pre-switch" : "" },
      el("td", {}, time(d.at)), el("td", {}, d.pod), el("td", {}, d.mode), el("td", {}, d.op),
      el("td", { class: MISMATCH.includes(d.class) ? "bad" : "" }, d.class, CLASS_NOTES[d.class] ? el("div", { class: "sub note" }, CLASS_NOTES[d.class]) : ""),
      el("td", {}, String(d.shop), el("div", { class: "sub" }, d.token)),
      el("td", {}, side(d.authority)), el("td", {}, side(d.shadow))));
  }
}

// ------------------------------------------------------------ kill switch

const kill = { scope: "", action: "engage" };

function openKill(scope, action) {
  kill.action = action;
  const sel = $("#kill-scope");
  sel.replaceChildren(el("option", { value: "global" }, "global (every pod and shop)"));
  for (const p of (state.status ? state.status.pods : [])) sel.append(el("option", { value: "pod:" + p.pod }, "pod " + p.pod));
  sel.append(el("option", { value: "shop" }, "one shop…"));
  if (scope.startsWith("shop:")) { sel.value = "shop"; $("#kill-shop").value = scope.slice(5); }
  else sel.value = scope;
  $("#kill-shop-label").hidden = sel.value !== "shop";
  $("#kill-force-label").hidden = true;
  $("#kill-force").checked = false;
  $("#kill-state-label").hidden = action !== "engage";
  $("#kill-title").textContent = action === "engage" ? "Engage the kill switch" : "Release the kill switch";
  $("#kill-reason").value = "";
  $("#kill-error").textContent = "";
  $("#kill-step1").hidden = false;
  $("#kill-step2").hidden = true;
  $("#kill-dialog").showModal();
  $("#kill-reason").focus();
}

function killScope() {
  const v = $("#kill-scope").value;
  return v === "shop" ? "shop:" + $("#kill-shop").value.trim() : v;
}

function initKill() {
  $("#kill-global").addEventListener("click", () => openKill("global", "engage"));
  $("#kill-scope").addEventListener("change", () => { $("#kill-shop-label").hidden = $("#kill-scope").value !== "shop"; $("#kill-force-label").hidden = true; });
  $("#kill-shop").addEventListener("input", () => { $("#kill-force-label").hidden = true; $("#kill-force").checked = false; });
  $("#kill-cancel").addEventListener("click", () => $("#kill-dialog").close());
  $("#kill-back").addEventListener("click", () => { $("#kill-step1").hidden = false; $("#kill-step2").hidden = true; });
  $("#kill-continue").addEventListener("click", () => {
    const reason = $("#kill-reason").value.trim();
    const scope = killScope();
    if (!reason) { $("#kill-error").textContent = "A reason is required."; return; }
    if (scope === "shop:" || !/^(global|pod:.+|shop:\d+)$/.test(scope)) { $("#kill-error").textContent = "Choose a scope (a shop id is a number)."; return; }
    kill.scope = scope;
    kill.reason = reason;
    const state2 = $("#kill-state").value;
    $("#kill-summary").textContent = kill.action === "engage"
      ? "Engage the kill switch (" + state2 + ") for " + scope + "? Redis decides again for every shop in the scope, each on its next call, once the relay lag is drained into it. Reason: “" + reason + "”"
      : "Release the kill switch of " + scope + "? The mode in the flags file applies again. Reason: “" + reason + "”";
    $("#kill-step1").hidden = true;
    $("#kill-step2").hidden = false;
    $("#kill-confirm").focus();
  });
  $("#kill-confirm").addEventListener("click", async () => {
    const body = { scope: kill.scope, reason: kill.reason };
    if (kill.action === "engage") body.state = $("#kill-state").value;
    if (!$("#kill-force-label").hidden && $("#kill-force").checked) body.force = true;
    $("#kill-confirm").disabled = true;
    try {
      const r = await api(kill.action === "engage" ? "POST" : "DELETE", "/admin/killswitch", body);
      if (r.status === 200) {
        $("#kill-dialog").close();
        const obeyed = r.data.obeyed_after_ms === null ? "not yet obeyed by this replica" : "this replica obeyed after " + r.data.obeyed_after_ms.toFixed(1) + " ms";
        toast((kill.action === "engage" ? "kill switch engaged for " : "kill switch released for ") + r.data.scope + ": " + obeyed +
          (r.data.relay_lag ? "; relay lag at the switch: " + r.data.relay_lag : "") +
          (r.data.fleet && r.data.fleet.summary ? "; " + r.data.fleet.summary : "") + " (audited)");
        document.body.dataset.lastKill = JSON.stringify(r.data);
      } else {
        $("#kill-step1").hidden = false;
        $("#kill-step2").hidden = true;
        $("#kill-error").textContent = (r.data && r.data.message) || ("failed: HTTP " + r.status);
        // A shop no pod lists: say it, and offer to write it anyway.
        if (r.data && r.data.error === "unknown_shop") $("#kill-force-label").hidden = false;
      }
    } catch (e) {
      $("#kill-error").textContent = String(e);
    } finally {
      $("#kill-confirm").disabled = false;
    }
    refresh();
  });
}

// --------------------------------------------------------------- refresh

async function refresh() {
  if (state.busy || !state.token) return;
  state.busy = true;
  try {
    const st = await api("GET", "/admin/rollout/status");
    if (st.status !== 200) throw new Error((st.data && st.data.message) || "status: HTTP " + st.status);
    state.status = st.data;
    const pods = st.data.pods.map((p) => p.pod);
    const have = Object.keys(state.series).length > 0;
    const [series, diffs, hist, ...rest] = await Promise.all([
      api("GET", "/admin/series?points=" + (have ? 3 : 90)),
      api("GET", "/admin/diffs?limit=20"),
      api("GET", "/admin/rollout/history?limit=20"),
      ...pods.map((p) => api("GET", "/admin/stats?pod=" + encodeURIComponent(p) + "&since=" + encodeURIComponent(state.since))),
      ...pods.map((p) => api("GET", "/admin/reconcile?pod=" + encodeURIComponent(p))),
    ]);
    const stats = rest.slice(0, pods.length).map((r) => r.status === 200 ? r.data : null);
    const recs = rest.slice(pods.length);
    state.history = hist.status === 200 ? hist.data.entries : [];
    state.reconciler = !recs.some((r) => r.status === 501);
    // The window the rates cover is the server's (Config.SeriesWindow).
    if (series.status === 200 && series.data.window_ms) {
      $("#pods-window").textContent = "rates and latency: this replica, last " + +(series.data.window_ms / 1000).toFixed(1) + " s";
    }
    for (const pod of pods) {
      const cur = state.series[pod] || [];
      const seen = new Set(cur.map((p) => p.at));
      for (const p of (series.data.pods[pod] || [])) if (!seen.has(p.at)) cur.push(p);
      state.series[pod] = cur.slice(-150);
    }
    renderBanner(st.data);
    renderPods(st.data);
    renderReplicas(st.data);
    renderPlan(st.data);
    renderStages(st.data);
    renderHistory();
    renderCharts(st.data);
    renderStats(st.data, stats);
    renderReconcile(st.data, recs.map((r) => r.status === 200 ? r.data : null));
    renderDiffs(diffs.status === 200 ? diffs.data.diffs : []);
    state.refreshes++;
    document.body.dataset.ready = "1";
    document.body.dataset.refreshes = String(state.refreshes);
    $("#dot").className = "dot ok";
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    // A refused token is said by showToken already.
    if (!(e instanceof TokenError)) {
      $("#dot").className = "dot bad";
      $("#updated").textContent = "refresh failed: " + e.message;
    }
  } finally {
    state.busy = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  initToken();
  initKill();
  initAdvance();
  refresh();
  setInterval(refresh, REFRESH_MS);
});
