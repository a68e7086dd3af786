// hpnlab watch: the page's side. The server sends the whole state when the page connects, then once a
// second what changed (server-sent events). window.watch holds what the page shows, for tests.
(function () {
  "use strict";
  const info = JSON.parse(document.getElementById("info").textContent);
  const COLOURS = { up: "#2e7d32", shaped: "#5e35b1", impaired: "#ef6c00", faulted: "#c2185b", down: "#d32f2f" };
  const WHAT = { up: "up (plane colour)", shaped: "shaped by the spec", impaired: "impaired (hpnlab impair)",
                 faulted: "fault on it", down: "down (no carrier)" };
  const watch = window.watch = { links: {}, nodes: {}, events: [], updates: 0, live: [], last: 0 };
  const $ = (s) => document.querySelector(s);
  document.getElementById("lab").textContent = `'${info.lab}' (${info.runtime})`;

  // --- legend -------------------------------------------------------------------------------------------
  const legend = $("#legend");
  for (const s of info.states) {
    const el = document.createElement("span");
    el.innerHTML = `<i style="border-top-color:${s === "up" ? "#1f77b4" : COLOURS[s]};` +
      `${s === "down" ? "border-top-style:dashed" : s === "shaped" ? "border-top-style:dotted" : ""}"></i>${WHAT[s]}`;
    legend.appendChild(el);
  }
  legend.insertAdjacentHTML("beforeend", `<span><i class="node" style="border-color:#d32f2f;background:#ffebee"></i>` +
    `node not healthy</span><span class="muted">up links keep their plane's colour (blue: plane 0, orange: plane 1)</span>`);

  // --- the picture --------------------------------------------------------------------------------------
  const lines = {}, boxes = {};
  document.querySelectorAll("#fabric line.link").forEach((l) => { lines[l.dataset.link] = l; });
  document.querySelectorAll("#fabric rect.node").forEach((r) => { boxes[r.dataset.node] = r; });
  const tip = $("#tip");
  function showTip(ev, text) { tip.textContent = text; tip.hidden = false;
    tip.style.left = (ev.clientX + 14) + "px"; tip.style.top = (ev.clientY + 12) + "px"; }
  document.getElementById("fabric").addEventListener("mousemove", (ev) => {
    const t = ev.target;
    if (t.dataset && t.dataset.link && watch.links[t.dataset.link]) {
      const l = watch.links[t.dataset.link];
      showTip(ev, `${t.dataset.link.replace("|", "  <->  ")}\n${l.state}: ${l.detail}`);
    } else if (t.dataset && t.dataset.node && watch.nodes[t.dataset.node]) {
      showTip(ev, nodeText(t.dataset.node, watch.nodes[t.dataset.node]));
    } else tip.hidden = true;
  });
  document.getElementById("fabric").addEventListener("mouseleave", () => { tip.hidden = true; });

  function nodeText(name, n) {
    return [`${name} (${n.role})` + (n.ok ? ": healthy" : ": NOT healthy"),
      ...["frr", "bgp", "bfd", "lacp", "host_routes", "agent", "late", "fare", "fault"]
        .filter((k) => n[k] !== undefined).map((k) => `${k}: ${n[k]}`)].join("\n");
  }

  function applyLinks(links) {
    for (const [id, l] of Object.entries(links)) {
      watch.links[id] = l;
      const el = lines[id];
      if (el) el.setAttribute("data-state", l.state);
    }
  }

  // --- the node table -----------------------------------------------------------------------------------
  const tbody = $("#nodes tbody");
  const rows = {};
  for (const name of Object.keys(info.nodes)) {
    const tr = document.createElement("tr");
    tr.dataset.node = name;
    tr.innerHTML = "<td></td>".repeat(7);
    tr.children[0].textContent = name;
    tbody.appendChild(tr);
    rows[name] = tr;
  }
  function frac(n, key) {
    const c = (n.counts || {})[key];
    return c ? [`${c[0]}/${c[1]}`, c[0] !== c[1]] : ["", false];
  }
  function applyNodes(nodes, flash) {
    for (const [name, n] of Object.entries(nodes)) {
      watch.nodes[name] = n;
      const box = boxes[name];
      if (box) box.setAttribute("data-ok", n.ok ? "true" : "false");
      const tr = rows[name];
      if (!tr) continue;
      const cells = [frac(n, "frr"), frac(n, "bgp"), frac(n, "bfd"), frac(n, "lacp"),
        [n.host_routes === undefined ? "" : String(n.host_routes), false],
        [n.agent === undefined ? "" : n.agent, n.agent !== undefined && n.agent !== "ok"]];
      cells.forEach(([text, bad], i) => { const td = tr.children[i + 1]; td.textContent = text; td.className = bad ? "bad" : ""; });
      tr.className = (n.ok ? "" : "bad") + (flash ? " changed" : "");
      tr.title = nodeText(name, n);
      if (n.fault) tr.children[0].textContent = `${name} ⚡`; else tr.children[0].textContent = name;
    }
  }

  // --- events -------------------------------------------------------------------------------------------
  const list = $("#events");
  function clock(t) {
    const d = new Date(t * 1000);
    return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
  }
  function addEvents(events) {
    for (const e of events) {
      watch.events.push(e);
      const li = document.createElement("li");
      li.className = e.severity;
      li.innerHTML = `<time></time><span></span>`;
      li.firstChild.textContent = clock(e.t);
      li.lastChild.textContent = e.what;
      li.dataset.t = e.t;
      // newest first: an agent's event can be older than the last poll's (it logged it meanwhile)
      let at = list.firstChild;
      while (at && +at.dataset.t > e.t) at = at.nextSibling;
      list.insertBefore(li, at);
    }
    while (list.children.length > 400) list.removeChild(list.lastChild);
  }

  // --- header -------------------------------------------------------------------------------------------
  function header(msg) {
    const h = $("#health");
    const badNodes = Object.entries(watch.nodes).filter(([, n]) => !n.ok).length;
    const badLinks = Object.values(watch.links).filter((l) => !["up", "shaped"].includes(l.state)).length;
    if (msg.running === false) { h.textContent = "lab is gone"; h.className = "pill bad"; }
    else if (!badNodes && !badLinks) { h.textContent = "healthy"; h.className = "pill ok"; }
    else { h.textContent = `${badLinks} link(s), ${badNodes} node(s) not healthy`; h.className = "pill bad"; }
    const f = $("#faults");
    f.innerHTML = "";
    const pills = [...(msg.faults || []).map((l) => [l, "fault"]),
      ...Object.keys(msg.impairments || {}).map((k) => [`impair ${k}`, "impair"])];
    for (const [label, kind] of pills) {
      const s = document.createElement("span"); s.className = `pill ${kind}`; s.textContent = label; f.appendChild(s);
    }
  }
  setInterval(() => {
    const age = Date.now() / 1000 - watch.last;
    $("#clock").textContent = watch.last ? `updated ${clock(watch.last)}` + (age > 3 ? ` (${age.toFixed(0)} s ago: no update)` : "") : "";
    if (watch.last && age > 3) $("#health").className = "pill stale";
  }, 500);

  // --- the experiment's live charts ---------------------------------------------------------------------
  let charts = null;
  const STREAM_COLOURS = ["#1f77b4", "#e6772e", "#2ca02c", "#9467bd", "#8c564b", "#17becf"];
  function faultBands(u) {
    const ln = watch.live[watch.live.length - 1];
    if (!ln) return;
    const ctx = u.ctx;
    ctx.save();
    ctx.fillStyle = "rgba(211,47,47,0.13)";
    for (const f of ln.faults || []) {
      const a = u.valToPos(f.applied - ln.t0, "x", true);
      const b = u.valToPos((f.reverted || ln.t) - ln.t0, "x", true);
      ctx.fillRect(a, u.bbox.top, Math.max(2, b - a), u.bbox.height);
    }
    ctx.restore();
  }
  function series(lines) {
    const xs = [], streams = {}, its = [];
    const names = Object.keys((lines[lines.length - 1] || {}).streams || {});
    names.forEach((n) => { streams[n] = []; });
    for (let i = 1; i < lines.length; i++) {
      const a = lines[i - 1], b = lines[i], dt = b.t - a.t;
      if (dt <= 0) continue;
      xs.push(+(b.t - b.t0).toFixed(2));
      for (const n of names) {
        const sa = (a.streams || {})[n], sb = (b.streams || {})[n];
        // packets received over packets sent in the second (the requested rate where senders do not say)
        const ok = sa && sb && sa.received !== null && sb.received !== null && b.t > b.t0;
        const sent = sa && sb && sa.sent != null && sb.sent != null ? sb.sent - sa.sent : sb && sb.pps * dt;
        streams[n].push(ok && sent > 0 ? Math.min(100, 100 * (sb.received - sa.received) / sent) : null);
      }
      its.push(a.iterations !== null && b.iterations !== null ? (b.iterations - a.iterations) / dt : null);
    }
    return { xs, names, streams, its };
  }
  function makeCharts(s, width) {
    const common = (title, label) => ({ title, width, height: 200, scales: { x: { time: false } },
      axes: [{ label: "seconds into the repetition" }, { label, size: 60 }], hooks: { drawClear: [faultBands] } });
    const d = new uPlot({ ...common("delivery per probe stream (faults shaded)", "% of packets sent"),
      scales: { x: { time: false }, y: { range: [0, 105] } },
      series: [{}, ...s.names.map((n, i) => ({ label: n, stroke: STREAM_COLOURS[i % 6], width: 2 }))] },
      [s.xs, ...s.names.map((n) => s.streams[n])], $("#chart-delivery"));
    const it = new uPlot({ ...common("workload iterations per second", "iterations/s"),
      series: [{}, { label: "iterations/s", stroke: "#455a64", width: 2 }] }, [s.xs, s.its], $("#chart-iterations"));
    return { d, it, names: s.names.join(","), hasIts: s.its.some((v) => v !== null) };
  }
  function applyLive(lines, reset) {
    if (reset) watch.live = [];
    for (const ln of lines) {
      const prev = watch.live[watch.live.length - 1];
      if (prev && prev.rep !== ln.rep) watch.live = [];
      watch.live.push(ln);
    }
    const last = watch.live[watch.live.length - 1];
    const box = $("#experiment");
    if (!last || (last.done && Date.now() / 1000 - last.t > 120)) {
      box.hidden = true; document.body.classList.remove("with-exp"); return;
    }
    box.hidden = false;
    document.body.classList.add("with-exp");
    $("#exp-title").textContent = `variant ${last.variant}, repetition ${last.rep}` +
      (last.done ? " (finished)" : `: ${Math.max(0, last.t - last.t0).toFixed(0)} / ${last.duration} s`);
    const s = series(watch.live);
    const width = Math.max(340, ($("#fabric").clientWidth - 40) / 2);  // the two charts side by side
    if (!charts || charts.names !== s.names.join(",")) {
      if (charts) { charts.d.destroy(); charts.it.destroy(); }
      charts = makeCharts(s, width);
    } else {
      charts.d.setData([s.xs, ...s.names.map((n) => s.streams[n])]);
      charts.it.setData([s.xs, s.its]);
    }
    $("#chart-iterations").hidden = !s.its.some((v) => v !== null);
  }

  // --- the stream ---------------------------------------------------------------------------------------
  function onMessage(msg) {
    if (msg.full) { watch.events = []; list.innerHTML = ""; }
    applyLinks(msg.links || {});
    applyNodes(msg.nodes || {}, !msg.full);
    addEvents(msg.events || []);
    applyLive(msg.live || [], !!msg.full);
    header(msg);
    watch.last = msg.t;
    watch.updates += 1;
  }
  const es = new EventSource("events");
  es.onmessage = (ev) => onMessage(JSON.parse(ev.data));
  es.onerror = () => { const h = $("#health"); h.textContent = "disconnected (retrying)"; h.className = "pill stale"; };
})();
