// The outbox dashboard. No framework, no build step. Every value that comes
// from the store (topics, keys, payloads, errors) is user data: it goes into
// the page with textContent or as an attribute value, never as markup.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  let token = ""; // kept in memory only: reloading the page forgets it
  let actions = false;
  let deadRows = 25;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }

  function fmtNum(n) {
    if (n === null || n === undefined) return "–";
    if (n >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + "M";
    if (n >= 1e4) return (n / 1e3).toFixed(n >= 1e5 ? 0 : 1) + "k";
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  function fmtDur(s) {
    if (s === null || s === undefined) return "–";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 90) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }

  function fmtTime(iso) {
    if (!iso) return "–";
    const d = new Date(iso);
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  async function api(path, opts) {
    opts = opts || {};
    const headers = Object.assign({}, opts.headers || {});
    if (opts.method === "POST" && token) headers["Authorization"] = "Bearer " + token;
    const resp = await fetch("api/" + path, Object.assign({}, opts, { headers, credentials: "omit", cache: "no-store" }));
    let body = null;
    try { body = await resp.json(); } catch (_) { /* not JSON */ }
    if (!resp.ok) {
      const msg = body && body.error ? body.error : resp.status + " " + resp.statusText;
      const err = new Error(msg);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  function showError(msg) {
    const e = $("error");
    e.hidden = !msg;
    e.textContent = msg || "";
  }

  // --- chart -------------------------------------------------------------

  function chart(svg, series, lines) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 600, H = 160, L = 44, B = 16, T = 6;
    const pts = series.filter((p) => lines.some((l) => p[l.field] !== null && p[l.field] !== undefined));
    let maxY = 0;
    for (const p of pts) for (const l of lines) if (p[l.field] > maxY) maxY = p[l.field];
    maxY = maxY <= 0 ? 1 : niceCeil(maxY);
    const t0 = series.length ? series[0].t : 0, t1 = series.length ? series[series.length - 1].t : 1;
    const x = (t) => L + ((t - t0) / Math.max(t1 - t0, 1)) * (W - L - 4);
    const y = (v) => T + (1 - v / maxY) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (maxY * i) / 4;
      const g = document.createElementNS(SVG, "line");
      g.setAttribute("class", "grid");
      g.setAttribute("x1", L); g.setAttribute("x2", W); g.setAttribute("y1", y(v)); g.setAttribute("y2", y(v));
      svg.append(g);
      const lab = document.createElementNS(SVG, "text");
      lab.setAttribute("class", "axis"); lab.setAttribute("x", L - 4); lab.setAttribute("y", y(v) + 3);
      lab.setAttribute("text-anchor", "end");
      lab.textContent = fmtNum(v);
      svg.append(lab);
    }
    if (series.length > 1) {
      const span = document.createElementNS(SVG, "text");
      span.setAttribute("class", "axis"); span.setAttribute("x", W - 4); span.setAttribute("y", H - 3);
      span.setAttribute("text-anchor", "end");
      span.textContent = "last " + fmtDur((t1 - t0) / 1000);
      svg.append(span);
    }
    for (const l of lines) {
      const xy = [];
      for (const p of series) {
        const v = p[l.field];
        if (v !== null && v !== undefined) xy.push([x(p.t), y(v)]);
      }
      if (!xy.length) continue;
      if (xy.length === 1) xy.push([xy[0][0] + 1, xy[0][1]]);
      if (l.area) {
        const a = document.createElementNS(SVG, "polygon");
        a.setAttribute("class", l.area);
        a.setAttribute("points", xy.map((q) => q.join(",")).join(" ") + " " + xy[xy.length - 1][0] + "," + y(0) + " " + xy[0][0] + "," + y(0));
        svg.append(a);
      }
      const pl = document.createElementNS(SVG, "polyline");
      pl.setAttribute("class", l.cls);
      pl.setAttribute("points", xy.map((q) => q.join(",")).join(" "));
      svg.append(pl);
    }
  }

  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // --- overview ----------------------------------------------------------

  function renderOverview(o) {
    actions = o.actions;
    const ro = $("readonly");
    ro.hidden = o.actions;
    ro.textContent = o.actions ? "" : o.read_only_hint;
    $("token-form").hidden = !o.actions;
    $("updated").textContent = o.last_sample ? "sampled " + fmtTime(o.last_sample) + " · every " + o.sample_every_seconds + " s" : "waiting for the first sample";
    if (o.backlog_error) showError("backlog: " + o.backlog_error); else showError("");
    const b = o.backlog;
    $("pending").textContent = b ? fmtNum(b.pending) : "–";
    $("oldest").textContent = b ? fmtDur(b.oldest_pending_seconds) : "–";
    const dead = $("dead-count");
    dead.textContent = b ? (b.dead_at_least ? "≥ " : "") + fmtNum(b.dead) : "–";
    dead.className = "value" + (b && b.dead > 0 ? " bad" : "");
    let eta = " ";
    if (b && b.pending === 0) eta = "drained";
    else if (o.eta_seconds !== null) eta = "ETA " + fmtDur(o.eta_seconds) + " at " + fmtNum(o.net_drain_per_second) + "/s net";
    else if (b) eta = "not draining";
    $("eta").textContent = eta;
    const last = o.series.length ? o.series[o.series.length - 1] : null;
    $("rate").textContent = o.series_has_rates ? fmtNum(last && last.delivered_per_second !== null ? last.delivered_per_second : 0) : "–";
    $("failrate").textContent = o.series_has_rates ? "failed " + fmtNum(last && last.failed_per_second !== null ? last.failed_per_second : 0) + "/s" : "no relay attached";
    $("heldcount").textContent = o.held_keys.length + (o.held_keys_complete ? "" : "+") + " key(s) held";

    chart($("chart-backlog"), o.series, [{ field: "pending", cls: "line-backlog", area: "area-backlog" }]);
    chart($("chart-rate"), o.series, [{ field: "delivered_per_second", cls: "line-rate" }, { field: "failed_per_second", cls: "line-fail" }]);

    const held = $("held");
    held.replaceChildren();
    if (o.held_keys_error) held.append(el("li", { class: "fail" }, o.held_keys_error));
    for (const k of o.held_keys) held.append(el("li", {}, el("code", {}, k.key), " ", el("span", { class: "muted" }, "on " + k.topic + (k.dead > 1 ? " (" + k.dead + " dead)" : ""))));
    if (!o.held_keys.length && !o.held_keys_error) held.append(el("li", { class: "muted" }, "none"));
    if (!o.held_keys_complete) held.append(el("li", { class: "muted" }, "(from the first " + o.held_keys_scanned + " dead events)"));

    const relays = $("relays");
    if (o.relays.length) {
      relays.replaceChildren();
      for (const r of o.relays) relays.append(renderRelay(r));
    }
  }

  const known = ["store_error", "broker_error", "store_failing_since", "broker_failing_since", "last_claim", "last_delivered", "in_flight", "claimed", "delivered", "retried", "dead", "released", "batches"];

  function renderRelay(r) {
    const h = r.health;
    const dl = el("dl", {});
    const row = (k, v, cls) => { dl.append(el("dt", {}, k), el("dd", cls ? { class: cls } : {}, v)); };
    row("store", h.store_error ? "failing since " + fmtTime(h.store_failing_since) + ": " + h.store_error : "ok", h.store_error ? "fail" : "ok");
    row("broker", h.broker_error ? "failing since " + fmtTime(h.broker_failing_since) + ": " + h.broker_error : "ok", h.broker_error ? "fail" : "ok");
    row("last delivery", h.last_delivered ? fmtTime(h.last_delivered) : "none yet");
    row("in flight", fmtNum(h.in_flight));
    row("delivered · retried · dead", fmtNum(h.delivered) + " · " + fmtNum(h.retried) + " · " + fmtNum(h.dead));
    for (const [k, v] of Object.entries(h)) {
      if (known.includes(k)) continue;
      row(k.replace(/_/g, " "), typeof v === "object" && v !== null ? JSON.stringify(v) : String(v));
    }
    return el("div", { class: "relay" }, el("div", { class: "name" }, r.owner), dl);
  }

  // --- dead letters ------------------------------------------------------

  function renderDead(list) {
    const tb = $("dead").querySelector("tbody");
    tb.replaceChildren();
    for (const e of list.events) {
      const pay = el("td", {}, el("pre", { class: "payload" }, e.payload.preview));
      const notes = [];
      if (e.payload.encoding === "hex") notes.push("binary, shown as hex");
      if (e.payload.truncated) notes.push("first part of " + e.payload.size + " bytes");
      if (notes.length) pay.append(el("div", { class: "note" }, notes.join("; ")));
      const err = el("td", { class: "err" }, e.last_error + (e.last_error_truncated ? " …" : ""));
      const act = el("td", { class: "actions" });
      const retry = el("button", { class: "retry", "data-id": String(e.id), disabled: !actions, title: actions ? "requeue: the relay delivers it next" : "read-only" }, "Retry");
      retry.addEventListener("click", () => act1("retry", e.id, retry));
      const skip = el("button", { class: "skip danger", "data-id": String(e.id), disabled: !actions, title: actions ? "delete it so its key's later events flow; it is not delivered" : "read-only" }, "Skip…");
      skip.addEventListener("click", () => confirmThen(skip, "skip:" + e.id, "Skip: delete it", () => act1("skip", e.id, skip)));
      showConfirm(skip, "skip:" + e.id, "Skip: delete it");
      act.append(retry, skip);
      tb.append(el("tr", { "data-id": String(e.id) },
        el("td", {}, String(e.id)), el("td", {}, e.topic), el("td", {}, el("code", {}, e.key)), el("td", {}, e.type),
        el("td", {}, String(e.attempts)), el("td", {}, fmtTime(e.created_at)), err, pay, act));
    }
    $("dead-empty").hidden = list.events.length > 0;
    $("dead-more").hidden = !list.next_after;
  }

  // confirming holds the dangerous actions waiting for their second click
  // (key → when the confirmation lapses), so that a refresh that redraws
  // their buttons keeps the confirmation.
  const confirming = new Map();

  // confirmThen turns a dangerous button into a confirmation for 4 s; a
  // second click within them runs fn.
  function confirmThen(btn, key, label, fn) {
    if ((confirming.get(key) || 0) > Date.now()) { confirming.delete(key); btn.classList.remove("confirm"); fn(); return; }
    confirming.set(key, Date.now() + 4000);
    showConfirm(btn, key, label);
  }

  // showConfirm shows btn as a confirmation while the one of key lasts.
  function showConfirm(btn, key, label) {
    const left = (confirming.get(key) || 0) - Date.now();
    if (left <= 0) return;
    const old = btn.textContent;
    btn.classList.add("confirm");
    btn.textContent = label;
    setTimeout(() => { btn.classList.remove("confirm"); btn.textContent = old; }, left);
  }

  function say(msg, bad) {
    const m = $("action-msg");
    m.textContent = msg;
    m.className = bad ? "fail" : "muted";
  }

  async function act1(what, id, btn) {
    btn.disabled = true;
    try {
      const r = await api("dead/" + id + "/" + what, { method: "POST" });
      say(what === "retry" ? "event " + id + " requeued: the relay delivers it next" : "event " + id + " skipped (deleted; " + r.event.event_id + ")");
      const row = btn.closest("tr");
      if (row) row.classList.add("gone");
    } catch (e) {
      say(what + " " + id + ": " + e.message, true);
      btn.disabled = false;
    }
    refresh();
  }

  async function purge(btn) {
    const body = { older_than: $("purge-age").value.trim() || "0s", topic: $("purge-topic").value.trim() };
    try {
      const r = await api("purge", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      say("purged " + r.purged + " dead event(s)");
    } catch (e) {
      say("purge: " + e.message, true);
    }
    btn.textContent = "Purge…";
    refresh();
  }

  // --- loop --------------------------------------------------------------

  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      renderOverview(await api("overview"));
      renderDead(await api("dead?limit=" + deadRows));
    } catch (e) {
      showError("the dashboard cannot be reached: " + e.message);
    } finally {
      busy = false;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      token = $("token").value.trim();
      $("token").value = "";
      $("token-state").textContent = token ? "token set (kept in this tab only)" : "";
      say("");
    });
    $("purge").addEventListener("click", (ev) => {
      const btn = ev.currentTarget;
      if (!actions) { say("read-only: no token configured", true); return; }
      const topic = $("purge-topic").value.trim();
      confirmThen(btn, "purge", "Purge " + (topic ? "dead events of " + topic : "every dead event") + " older than " + ($("purge-age").value.trim() || "0s"), () => purge(btn));
    });
    $("dead-more").addEventListener("click", () => { deadRows = Math.min(deadRows * 2, 200); refresh(); });
    refresh();
    setInterval(refresh, 2000);
  });
})();
