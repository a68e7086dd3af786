/* hpnlab report.html: draws the page from the JSON inlined in it (hpnlab.traffic.output.htmlreport), with uPlot.
   Nothing is fetched. window.hpnlabReport exposes the charts and the replay (the suite's browser test reads
   them). */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const R = window.hpnlabReport = { data: D, plots: [], colours: D.colours, replay: null };
  const PALETTE = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#ff7f0e",
                   "#7f7f7f", "#393b79"];
  const DASH = [[], [7, 3], [2, 3], [10, 3, 2, 3], [1, 4], [14, 4]];
  const WORKLOAD = ["#111111", "#555555", "#8a8a8a", "#6d4c41", "#33691e", "#004d40"];
  const FAULT_FILL = "rgba(213,0,0,0.08)";
  const SHOWN_BINS = 150;  // a delivery chart's bins across its visible span (never finer than the data's)
  const KIND_ORDER = ["carrier", "micro-bfd", "lacp", "neighbour", "host-route", "nexthop", "stack", "fib"];

  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of kids.flat(Infinity)) if (c != null) e.append(c.nodeType ? c : document.createTextNode(String(c)));
    return e;
  }
  const fmt = (v, unit, nd) => v == null ? "–" : (+v).toFixed(nd == null ? 1 : nd) + (unit || "");
  const streamColour = i => PALETTE[i % PALETTE.length];
  const plainCode = s => (s || "").replace(/`/g, "");
  const anchor = name => "v-" + name.replace(/[^A-Za-z0-9_-]/g, "_");

  function widthOf(el) { return Math.max(360, Math.floor(el.getBoundingClientRect().width) - 4); }
  const resizers = [];
  window.addEventListener("resize", () => resizers.forEach(f => f()));

  // --- fault windows: shaded behind a chart's data --------------------------------------------------------------
  function faultShading(getWindows) {
    return { hooks: { drawClear: [u => {
      const ctx = u.ctx, top = u.bbox.top, hgt = u.bbox.height;
      ctx.save();
      const labelled = new Set(), merged = new Map();  // a fault's windows in the repetitions differ by ms: one band
      for (const w of getWindows()) {
        const m = merged.get(w.label);
        merged.set(w.label, m ? { label: w.label, a: Math.min(m.a, w.a), b: Math.max(m.b, w.b) } : w);
      }
      for (const w of merged.values()) {
        const a = u.valToPos(w.a, "x", true), b = u.valToPos(w.b, "x", true);
        const x0 = Math.max(u.bbox.left, Math.min(a, b)), x1 = Math.min(u.bbox.left + u.bbox.width, Math.max(a, b));
        if (x1 <= x0) continue;
        ctx.fillStyle = FAULT_FILL;
        ctx.fillRect(x0, top, x1 - x0, hgt);
        if (!labelled.has(w.label)) {
          labelled.add(w.label);
          ctx.fillStyle = "#b71c1c";
          ctx.font = `${Math.round(11 * devicePixelRatio)}px system-ui, sans-serif`;
          ctx.fillText(w.label, x0 + 3 * devicePixelRatio, top + 12 * devicePixelRatio);
        }
      }
      ctx.restore();
    }] } };
  }

  function markerLine(getX, colour) {
    return { hooks: { draw: [u => {
      const x = getX();
      if (x == null) return;
      const px = u.valToPos(x, "x", true);
      if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) return;
      const ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = colour;
      ctx.lineWidth = 2 * devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(px, u.bbox.top);
      ctx.lineTo(px, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.restore();
    }] } };
  }

  function durations() {
    const ds = [...new Set(D.variants.map(v => v.duration))].sort((a, b) => a - b);
    return ds.length > 1 ? `${ds[0]}-${ds[ds.length - 1]} (each variant's)` : String(D.duration);
  }

  // --- header ----------------------------------------------------------------------------------------------------
  function header() {
    const p = D.provenance;
    const head = document.getElementById("head");
    const commit = p.commit ? String(p.commit).slice(0, 12) + (p.dirty === true ? " (dirty)" : "") : "unknown";
    head.append(
      h("h1", { text: `hpnlab experiment ${D.experiment}` }),
      h("div", { class: "sub", text: `${D.description || ""}${D.description ? " · " : ""}${D.variants.length} ` +
        `variant(s) × ${D.repetitions} repetition(s) × ${durations()} s` }),
      h("div", { class: "prov", text: `run ${p.started || "?"} · hpnlab ${p.version || "?"} commit ${commit} · ` +
        `kernel ${(p.machine || {}).kernel || "?"} · FRR ${(p.machine || {}).frr || "?"} · runtime ${p.runtime || "?"}` }));
    if (D.partial) head.append(h("div", { class: "partial", text: "Partial results: " + D.partial }));
    document.title = `hpnlab ${D.experiment}`;
  }

  // --- summary ---------------------------------------------------------------------------------------------------
  function summary() {
    const S = D.summary, box = document.getElementById("summary-table");
    if (!S.own) {
      const grid = h("div", { class: "blocks", id: "summary-blocks" });
      for (const b of S.blocks) {
        const title = h("div", { class: "btitle" }, h("a", { href: "#" + anchor(b.variant), text: b.variant }),
          b.fault ? ` / ${b.fault} / n ${b.n}` : "");
        if (b.error) { grid.append(h("div", { class: "block", "data-variant": b.variant }, title, h("div", { class: "error", text: "FAILED: " + b.error }))); continue; }
        if (!b.cells) { grid.append(h("div", { class: "block", "data-variant": b.variant }, title, h("div", { class: "note", text: b.note || "" }))); continue; }
        const rows = S.figures.filter(f => b.cells[f.name].some(c => c !== "")).map(f => {
          const cells = b.cells[f.name];
          return h("tr", {}, h("th", { class: "l fig", title: `${f.name}: ${f.legend}` + (f.key ? `\nresults.json: ${f.key}` : ""), text: f.name }),
            cells.map(c => h("td", { class: (f.name === "flagged" && /FLAG/.test(c)) || (f.name === "recovered" && /NO/.test(c)) ||
              /DEAD/.test(c) ? "flag" : f.name === "recovered" && c === "yes" ? "ok" : null, text: c })));
        });
        grid.append(h("div", { class: "block", "data-variant": b.variant }, title, h("table", { class: "data" },
          h("thead", {}, h("tr", {}, h("th", { class: "l" }), b.streams.map(st => h("th", { text: st })))), h("tbody", {}, rows))));
      }
      box.append(grid);
    }
    box.append(h("details", { open: S.own }, h("summary", { text: "summary.txt, as printed" }), h("pre", { class: "under", text: S.text })));
    if (D.own_plot) box.append(h("img", { src: D.own_plot, alt: "plot.png: this workload's own figures", style: "max-width:100%" }));
  }

  // --- delivery over time ------------------------------------------------------------------------------------------
  function deliveryChart(v, host, opts) {
    // opts: {height, reps (indices), replay: {getT}} ; returns {plot, series meta}
    const n = v.runs.length ? Math.max(...v.runs.map(r => Math.max(0, ...Object.values(r.delivery).map(s => s ? s.length : 0)))) : 0;
    const raw = [], wparts = [];
    const series = [{ label: "s", value: (u, x) => x == null ? "–" : x.toFixed(3) + " s" }];
    const meta = [];
    const reps = opts.reps || v.runs.map((_, k) => k);
    reps.forEach(k => {
      const run = v.runs[k];
      v.streams.forEach((s, si) => {
        const ys = run.delivery[s];
        if (!ys) return;
        raw.push(ys.concat(Array(n - ys.length).fill(null)));
        series.push({ label: `${s} · rep ${run.rep}`, stroke: streamColour(si), width: reps.length > 1 ? 1.1 : 1.4,
                      dash: DASH[k % DASH.length], value: (u, y) => fmt(y, " %"), points: { show: false } });
        meta.push({ rep: k, stream: s });
      });
    });
    reps.forEach(k => {
      const w = v.runs[k].workload;
      if (!w || !w.x.length) return;
      wparts.push([w.x, w.y]);
      series.push({ label: `${w.label}${w.pct ? " (% of baseline)" : ""} · rep ${v.runs[k].rep}`,
                    stroke: WORKLOAD[k % WORKLOAD.length], width: 1.6, dash: DASH[k % DASH.length], spanGaps: true,
                    value: (u, y) => fmt(y, w.pct ? " %" : ""), points: { show: false } });
      meta.push({ rep: k, stream: "workload" });
    });
    // Bins as wide as the visible span needs (about SHOWN_BINS across the chart), down to the data's own
    // when zoomed in: 10 ms bins over a whole run are noise, over a fault's window they are the gap itself.
    const rebin = f => {
      const m = Math.ceil(n / f);
      const x = Array.from({ length: m }, (_, j) => +((j * f + Math.min(f, n - j * f) / 2) * v.bin_s).toFixed(4));
      const cols = raw.map(ys => Array.from({ length: m }, (_, j) => {
        let sum = 0, cnt = 0;
        for (let i = j * f; i < Math.min(n, (j + 1) * f); i++) if (ys[i] != null) { sum += ys[i]; cnt++; }
        return cnt ? +(sum / cnt).toFixed(1) : null;
      }));
      return wparts.length ? uPlot.join([[x, ...cols], ...wparts]) : [x, ...cols];
    };
    const factor = span => Math.max(1, Math.floor(span / v.bin_s / SHOWN_BINS));
    let cur = factor(v.duration), busy = false;
    const data = rebin(cur);
    if (opts.onBin) opts.onBin(cur * v.bin_s);
    const windows = () => reps.filter(k => !opts.visibleRep || opts.visibleRep(k)).flatMap(k => v.runs[k].faults.map(
      f => ({ a: f.a, b: f.b == null ? v.duration : f.b, label: f.label })));
    const plugins = [faultShading(windows)];
    if (opts.marker) plugins.push(markerLine(opts.marker, "#111"));
    const plot = new uPlot({
      width: widthOf(host), height: opts.height || 300, plugins,
      cursor: { sync: { key: opts.sync || null }, drag: { x: true, y: false } },
      scales: { x: { time: false },
                y: { range: (u, mn, mx) => [Math.min(0, mn), Math.max(112, mx == null ? 0 : mx * 1.04)] } },
      axes: [{ label: "seconds since the traffic started", labelSize: 22 },
             { label: opts.ylabel || "% delivered / % of baseline", labelSize: 22, size: 48 }],
      legend: { live: true },
      hooks: { setScale: [(u, key) => {
        if (key !== "x" || busy || u.scales.x.min == null) return;
        const f = factor(u.scales.x.max - u.scales.x.min);
        if (f === cur) return;
        setTimeout(() => {  // after uPlot has finished this change: new data, then the window asked for
          const { min, max } = u.scales.x;
          cur = factor(max - min);
          busy = true;
          u.setData(rebin(cur));
          u.setScale("x", { min, max });
          busy = false;
          u.binS = +(cur * v.bin_s).toFixed(3);
          if (opts.onBin) opts.onBin(cur * v.bin_s);
        }, 0);
      }] },
      series,
    }, data, host);
    plot.binS = +(cur * v.bin_s).toFixed(3);  // the bin shown now (the suite's browser test reads it)
    R.plots.push(plot);
    resizers.push(() => plot.setSize({ width: widthOf(host), height: opts.height || 300 }));
    return { plot, meta };
  }

  function variants() {
    const box = document.getElementById("variants");
    D.variants.forEach((v, vi) => {
      const binNote = h("span", {});
      const card = h("div", { class: "card", id: anchor(v.name) },
        h("h3", { text: v.name }), h("div", { class: "desc" }, [v.description, v.workload && v.workload !== "none" ?
          `workload: ${v.workload}` : null].filter(Boolean).map(x => x + " · "), binNote));
      box.append(card);
      if (v.error) card.append(h("div", { class: "error", text: "FAILED: " + v.error }));
      if (!v.runs.length) { card.append(h("div", { class: "note", text: "no finished repetition" })); return; }
      if (!v.runs.some(r => r.workload || Object.values(r.delivery).some(Boolean))) {
        card.append(h("div", { class: "note", text: `no probe stream and no workload rate over time in these results` +
          (v.workload ? ` (the ${v.workload} workload's own figures are in the summary above)` : "") }));
        return;
      }
      const controls = h("div", { class: "controls" });
      const host = h("div", {});
      card.append(controls, host);
      const shown = { rep: v.runs.map(() => true), stream: {} };
      const { plot, meta } = deliveryChart(v, host, { sync: "delivery", visibleRep: k => shown.rep[k],
        onBin: w => { binNote.textContent = `delivery in bins of ${Math.round(w * 1000)} ms` +
          (w > v.bin_s + 1e-9 ? ` (${Math.round(v.bin_s * 1000)} ms when zoomed in)` : ""); } });
      const apply = () => {
        meta.forEach((m, i) => plot.setSeries(i + 1, { show: shown.rep[m.rep] && shown.stream[m.stream] !== false }));
        plot.redraw(false);
      };
      if (v.runs.length > 1) {
        controls.append(h("span", { class: "group" }, h("b", { text: "repetitions" }), v.runs.map((r, k) =>
          h("label", {}, h("input", { type: "checkbox", checked: true, "data-rep": r.rep,
            onchange: e => { shown.rep[k] = e.target.checked; apply(); } }),
            h("span", { class: "swatch", style: `border-top-style:${k ? (k === 2 ? "dotted" : "dashed") : "solid"};border-color:#555` }),
            ` ${r.rep}`))));
      }
      const streams = [...new Set(meta.map(m => m.stream))];
      controls.append(h("span", { class: "group" }, h("b", { text: "streams" }), streams.map(s =>
        h("label", {}, h("input", { type: "checkbox", checked: true, "data-stream": s,
          onchange: e => { shown.stream[s] = e.target.checked; apply(); } }),
          h("span", { class: "swatch", style: `border-color:${s === "workload" ? "#111" :
            streamColour(v.streams.indexOf(s))}` }), ` ${s}`))));
      const missing = v.streams.filter(s => v.runs.every(r => !r.delivery[s]));
      if (missing.length) controls.append(h("span", { class: "note", text: `kept no series: ${missing.join(", ")}` }));
      const died = v.runs.filter(r => r.workload && r.workload.died != null);
      if (died.length) controls.append(h("span", { class: "note error", text: died.map(r =>
        `rep ${r.rep}: the job died at ${r.workload.died} s`).join("; ") }));
    });
  }

  // --- convergence timeline ------------------------------------------------------------------------------------------
  function timelineCard(v, box) {
    const card = h("div", { class: "card" }, h("h3", { text: v.name }));
    box.append(card);
    const choices = [];
    v.runs.forEach((r, k) => r.timelines.forEach((tl, fi) => { if (tl) choices.push({ k, fi, tl, rep: r.rep }); }));
    if (!choices.length) { card.append(h("div", { class: "note", text: "no fault with a timeline" })); return; }
    const first = choices.find(c => c.tl.split.gap_ms != null && c.tl.events.length) || choices[0];
    const sel = h("select", {}, choices.map((c, i) => h("option", { value: i, selected: c === first,
      text: `repetition ${c.rep}: ${c.tl.fault}` })));
    const split = h("div", { class: "split" });
    const host = h("div", {});
    const hover = h("div", { class: "hover" });
    const evbox = h("div", { class: "events" });
    card.append(h("div", { class: "controls" }, h("b", { text: "fault" }), sel), split, host, hover, evbox);
    let plot = null;
    const draw = () => {
      const c = choices[+sel.value], tl = c.tl, sp = tl.split;
      if (plot) { plot.destroy(); R.plots.splice(R.plots.indexOf(plot), 1); plot = null; }
      host.textContent = "";
      split.textContent = "";
      if (sp.gap_ms != null) {
        split.append(
          `longest converged gap ${fmt(sp.gap_ms, " ms")}` + (sp.began_ms >= 1 ? `, began ${fmt(sp.began_ms, " ms")} after the fault` : "") +
          `, closed ${fmt(sp.gap_closed_ms, " ms")} after it began = `,
          h("b", { text: `detection ${fmt(sp.detection_ms, " ms")}` }), " + ",
          h("b", { text: `protocol ${fmt(sp.protocol_ms, " ms")}` }), " + ",
          h("b", { text: `delivery ${fmt(sp.delivery_ms, " ms")}` }),
          `; waiting for CPU at most ${fmt(sp.cpu_ms, " ms")}`,
          h("br"), h("span", { class: "note", text: `detected by ${sp.detected_by || "–"}; last change ${sp.last_change || "–"}` }));
      } else split.append(h("span", { class: "note", text: sp.why || "no flow converged from this fault" }));
      const evs = tl.events;
      if (!evs.length) { host.append(h("div", { class: "note", text: "no event recorded" })); evbox.textContent = ""; return; }
      const nodes = [];
      evs.forEach(e => { if (!nodes.includes(e[1])) nodes.push(e[1]); });
      const xs = [], idx = [];
      let last = -Infinity;
      evs.forEach((e, i) => { let x = e[0]; if (x <= last) x = last + 1e-4; xs.push(x); idx.push(i); last = x; });
      const kinds = KIND_ORDER.filter(k => evs.some(e => e[2] === k));
      const data = [xs];
      const series = [{ label: "ms", value: (u, x) => x == null ? "–" : x.toFixed(1) + " ms" }];
      kinds.forEach(kind => {
        data.push(evs.map(e => e[2] === kind ? nodes.indexOf(e[1]) : null));
        series.push({ label: kind, stroke: D.timeline_colours[kind] || "#333", width: 0, paths: () => null,
                      points: { show: true, size: 7, width: 1, fill: D.timeline_colours[kind] || "#333" },
                      value: (u, y) => y == null ? "" : nodes[y] });
      });
      const pathIdx = tl.path.map(p => evs.findIndex(e => e[0] === p[0] && e[1] === p[1] && e[3] === p[3]));
      if (pathIdx.length === 2 && pathIdx.every(i => i >= 0)) {
        data.push(evs.map((e, i) => pathIdx.includes(i) ? nodes.indexOf(e[1]) : null));
        series.push({ label: "critical path", stroke: "#000", width: 2.5, spanGaps: true,
                      points: { show: true, size: 9, stroke: "#000", fill: "#fff" }, value: (u, y) => y == null ? "" : nodes[y] });
      }
      const gap = sp.gap_ms != null ? { a: sp.began_ms || 0, b: (sp.began_ms || 0) + sp.gap_closed_ms } : null;
      const shade = { hooks: { drawClear: [u => {
        const ctx = u.ctx;
        ctx.save();
        if (gap) {
          const a = u.valToPos(gap.a, "x", true), b = u.valToPos(gap.b, "x", true);
          ctx.fillStyle = "rgba(120,120,120,0.13)";
          ctx.fillRect(Math.max(a, u.bbox.left), u.bbox.top, Math.max(0, Math.min(b, u.bbox.left + u.bbox.width) - Math.max(a, u.bbox.left)), u.bbox.height);
        }
        for (const [at, col] of [[0, "#d50000"], [tl.reverted_ms, "#2e7d32"]]) {
          if (at == null) continue;
          const x = u.valToPos(at, "x", true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.strokeStyle = col; ctx.lineWidth = 1.5 * devicePixelRatio;
          ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        }
        ctx.restore();
      }] } };
      const height = Math.min(520, 90 + 20 * nodes.length);
      plot = new uPlot({
        width: widthOf(host), height, plugins: [shade],
        cursor: { drag: { x: true, y: false }, points: { size: 10 } },
        scales: { x: { time: false }, y: { range: [-0.7, nodes.length - 0.3] } },
        axes: [{ label: "ms since the fault was applied (red: applied, green: repaired)", labelSize: 22 },
               { size: 78, splits: () => nodes.map((_, i) => i), values: (u, splits) => splits.map(s => Number.isInteger(s) ? (nodes[s] || "") : ""),
                 grid: { stroke: "#f0f0f0" } }],
        legend: { live: false },
        hooks: { setCursor: [u => {
          const i = u.cursor.idx;
          hover.textContent = i == null ? "" : `${evs[i][0].toFixed(1)} ms  ${evs[i][1]}  ${evs[i][2]}: ${evs[i][3]}`;
        }] },
        series,
      }, data, host);
      R.plots.push(plot);
      if (gap) {  // as timeline.png: from just before the gap to a little after it closed
        const lo = gap.a < 50 ? -5 : gap.a - 50, hi = gap.a + Math.max((gap.b - gap.a) * 1.3, 50);
        plot.setScale("x", { min: lo, max: hi });
      } else {  // the failure's events (before the repair's); double-click shows them all
        const before = evs.filter(e => tl.reverted_ms == null || e[0] < tl.reverted_ms).map(e => e[0]);
        if (before.length && before.length < evs.length) plot.setScale("x", { min: -5, max: Math.max(50, Math.max(...before) * 1.15) });
      }
      evbox.textContent = "";
      const rows = evs.map((e, i) => h("tr", { class: pathIdx.includes(i) ? "crit" : null },
        h("td", { text: e[0].toFixed(1) }), h("td", { class: "l", text: e[1] }), h("td", { class: "l", text: e[2] }),
        h("td", { class: "l", text: e[3] })));
      evbox.append(h("table", { class: "data" }, h("thead", {}, h("tr", {}, h("th", { text: "ms" }),
        h("th", { class: "l", text: "node" }), h("th", { class: "l", text: "kind" }),
        h("th", { class: "l", text: tl.events_total > evs.length ?
          `event (the first ${evs.length} of ${tl.events_total} kept)` : "event (critical path highlighted)" }))),
        h("tbody", {}, rows)));
    };
    sel.addEventListener("change", draw);
    draw();
    resizers.push(() => plot && plot.setSize({ width: widthOf(host), height: plot.height }));
  }

  function timelines() {
    const box = document.getElementById("timelines");
    const withRuns = D.variants.filter(v => v.runs.length);
    if (!withRuns.length) box.append(h("div", { class: "note", text: "no finished repetition" }));
    withRuns.forEach(v => timelineCard(v, box));
  }

  // --- replay --------------------------------------------------------------------------------------------------------
  function replay() {
    const box = document.getElementById("replay-box");
    const vs = D.variants.filter(v => v.runs.length);
    if (!vs.length) { box.append(h("div", { class: "note", text: "no finished repetition" })); return; }
    const vsel = h("select", { id: "replay-variant" }, vs.map((v, i) => h("option", { value: i, text: v.name })));
    const rsel = h("select", { id: "replay-rep" });
    const slider = h("input", { type: "range", id: "replay-slider", min: 0, max: D.duration, step: 0.01, value: 0 });
    const tlabel = h("span", { class: "t" });
    const play = h("button", { type: "button", text: "▶ play" });
    const speed = h("select", {}, [["0.25", "¼×"], ["1", "1×"], ["0.1", "0.1×"]].map(([v, t]) => h("option", { value: v, text: t })));
    const states = h("div", { class: "legend-states" },
      [["up", "#888", ""], ["down", D.colours.down, "6 3"], ["impaired (loss, one way, LACP member out)", D.colours.impaired, ""],
       ["shaped", D.colours.shaped, ""]].map(([t, c, dash]) => h("span", {},
        h("span", { class: "swatch", style: `border-color:${c};border-top-style:${dash ? "dashed" : "solid"}` }), " link " + t)),
      h("span", {}, h("span", { class: "swatch", style: "border-color:#ffcdd2;border-top-width:10px" }), " node stopped (hang)"),
      h("span", {}, h("span", { class: "swatch", style: "border-color:#bdbdbd;border-top-width:10px" }), " node off"),
      h("span", {}, h("span", { style: "color:#c62828;font-weight:600", text: "−n" }), " prefixes a router has withdrawn from its FIB"),
      h("span", {}, h("span", { style: "color:#6a737d;font-weight:600", text: "Δn" }), " its FIB changes so far (none withdrawn)"));
    const fabric = h("div", { class: "fabric" });
    const note = h("div", { class: "note" });
    const active = h("div", { class: "active-faults" });
    const bars = h("div", { class: "bars" });
    const chartHost = h("div", {});
    const evbox = h("div", { class: "events" });
    box.append(h("div", { class: "replay-top" }, h("b", { text: "variant" }), vsel, h("b", { text: "repetition" }), rsel,
      play, speed, slider, tlabel), states,
      h("div", { class: "replay-grid" }, h("div", {}, fabric, note),
        h("div", {}, active, h("div", { class: "note", text: "delivery at this instant (% of the sending rate over the 100 ms around it)" }),
          bars, chartHost, evbox)));
    let v = null, run = null, plot = null, timer = null, svg = null, orig = new Map(), events = [];
    const st = { t: 0 };

    function fillReps() {
      rsel.textContent = "";
      vs[+vsel.value].runs.forEach((r, k) => rsel.append(h("option", { value: k, text: String(r.rep) })));
    }
    function load() {
      v = vs[+vsel.value];
      run = v.runs[+rsel.value || 0];
      slider.max = v.duration;
      fabric.innerHTML = v.picture || "";
      svg = fabric.querySelector("svg");
      if (svg) { svg.removeAttribute("width"); svg.removeAttribute("height"); }
      orig = new Map();
      fabric.querySelectorAll("[data-link]").forEach(l => orig.set(l, [l.getAttribute("stroke"), l.getAttribute("stroke-width")]));
      fabric.querySelectorAll("[data-node]").forEach(n => orig.set(n, [n.getAttribute("fill"), n.getAttribute("stroke")]));
      note.textContent = v.picture ? (v.replay_note || `the lab of variant ${v.name} (${v.lab || ""}), rebuilt from its experiment file`) :
        (v.replay_note || "no picture of this lab");
      // the events shown beside the fabric: every fault's timeline events, on the repetition's clock
      events = [];
      run.faults.forEach((f, fi) => {
        events.push([f.a, "", "fault", "applied: " + f.label]);
        if (f.b != null) events.push([f.b, "", "fault", "repaired: " + f.label]);
        const tl = run.timelines[fi];
        if (tl) tl.events.forEach(e => events.push([+(f.a + e[0] / 1000).toFixed(4), e[1], e[2], e[3]]));
      });
      events.sort((a, b) => a[0] - b[0]);
      if (plot) { plot.destroy(); R.plots.splice(R.plots.indexOf(plot), 1); }
      chartHost.textContent = "";
      const k = v.runs.indexOf(run);
      plot = deliveryChart(v, chartHost, { reps: [k], height: 220, marker: () => st.t, ylabel: "%" }).plot;
      plot.over.addEventListener("click", () => {
        if (plot.cursor.left >= 0) setTime(plot.posToVal(plot.cursor.left, "x"));
      });
      setTime(st.t);
    }
    function lastState(changes, t) {
      const m = new Map();
      for (const c of changes) { if (c[0] > t) break; m.set(c[1], c[2]); }
      return m;
    }
    function setTime(t) {
      t = Math.max(0, Math.min(v.duration, +t));
      st.t = t;
      slider.value = t;
      tlabel.textContent = t.toFixed(2) + " s";
      const links = lastState(run.links, t), nodes = lastState(run.nodes, t);
      const routes = new Map();
      for (const c of run.routes) { if (c[0] > t) break; routes.set(c[1], c); }
      fabric.querySelectorAll("[data-link]").forEach(l => {
        const s = links.get(l.getAttribute("data-link")) || "up";
        const [stroke, width] = orig.get(l);
        l.setAttribute("data-state", s);
        l.setAttribute("stroke", s === "up" ? stroke : D.colours[s]);
        l.setAttribute("stroke-width", s === "up" ? width : 3.2);
        l.setAttribute("stroke-opacity", s === "up" ? 0.75 : 1);
        if (s === "down") l.setAttribute("stroke-dasharray", "6 3"); else l.removeAttribute("stroke-dasharray");
      });
      if (svg) svg.querySelectorAll(".badge").forEach(b => b.remove());
      fabric.querySelectorAll("[data-node]").forEach(n => {
        const name = n.getAttribute("data-node"), s = nodes.get(name) || "up", [fill, stroke] = orig.get(n);
        n.setAttribute("data-state", s);
        n.setAttribute("fill", s === "off" ? "#bdbdbd" : s === "hung" ? "#ffcdd2" : s === "dead" ? "#ffe0b2" : fill);
        n.setAttribute("stroke", s === "up" ? stroke : "#b71c1c");
        n.setAttribute("stroke-width", s === "up" ? 1 : 2.5);
        const rc = routes.get(name);
        if (rc && svg) {
          const x = +n.getAttribute("x") + +n.getAttribute("width") + 2, y = +n.getAttribute("y") + 9;
          const b = document.createElementNS("http://www.w3.org/2000/svg", "text");
          b.setAttribute("x", x); b.setAttribute("y", y); b.setAttribute("class", "badge");
          b.setAttribute("font-size", "10"); b.setAttribute("font-weight", "bold");
          b.setAttribute("fill", rc[2] ? "#c62828" : "#6a737d"); b.setAttribute("font-family", "sans-serif");
          b.textContent = rc[2] ? "−" + rc[2] : "Δ" + rc[3];
          const tip = document.createElementNS("http://www.w3.org/2000/svg", "title");
          tip.textContent = `${name}: ${rc[2]} prefixes withdrawn from its FIB, ${rc[3]} FIB changes so far`;
          b.append(tip);
          svg.append(b);
        }
      });
      const on = run.faults.filter(f => f.a <= t && (f.b == null || t < f.b));
      active.textContent = "";
      active.append(on.length ? h("span", {}, "active: ", on.map((f, i) => [i ? ", " : "", h("span", { class: "f", text: f.label })]))
        : h("span", { class: "note", text: "no fault active" }));
      bars.textContent = "";
      const lo = Math.max(0, Math.floor((t - 0.05) / v.bin_s)), hi = Math.max(lo + 1, Math.floor((t + 0.05) / v.bin_s));
      v.streams.forEach((s, si) => {
        const ys = run.delivery[s];
        const win = ys ? ys.slice(lo, hi).filter(y => y != null) : [];
        const y = win.length ? win.reduce((a, b) => a + b, 0) / win.length : null;
        bars.append(h("div", { class: "bar" }, h("span", { text: s }),
          h("div", { class: "track" }, h("div", { class: "fill", style: `width:${Math.max(0, Math.min(100, y || 0))}%;background:${streamColour(si)}` })),
          h("span", { text: fmt(y, " %") })));
      });
      evbox.textContent = "";
      const upto = events.filter(e => e[0] <= t);
      const shown = upto.slice(-12).reverse();
      evbox.append(h("table", { class: "data" }, h("thead", {}, h("tr", {}, h("th", { text: "s" }),
        h("th", { class: "l", text: "node" }), h("th", { class: "l", text: "kind" }),
        h("th", { class: "l", text: `the latest events, newest first (${upto.length} of ${events.length} so far)` }))),
        h("tbody", {}, shown.map(e => h("tr", { class: "past" }, h("td", { text: e[0].toFixed(3) }),
          h("td", { class: "l", text: e[1] }), h("td", { class: "l", text: e[2] }), h("td", { class: "l", text: e[3] }))))));
      if (plot) plot.redraw(false);
    }
    vsel.addEventListener("change", () => { fillReps(); load(); });
    rsel.addEventListener("change", load);
    slider.addEventListener("input", () => setTime(slider.value));
    play.addEventListener("click", () => {
      if (timer) { clearInterval(timer); timer = null; play.textContent = "▶ play"; return; }
      if (st.t >= v.duration - 0.02) st.t = 0;
      play.textContent = "❚❚ pause";
      let last = performance.now();
      timer = setInterval(() => {
        const now = performance.now();
        setTime(st.t + (now - last) / 1000 * +speed.value);
        last = now;
        if (st.t >= v.duration) { clearInterval(timer); timer = null; play.textContent = "▶ play"; }
      }, 50);
    });
    fillReps();
    const first = vs[0].runs[0].faults[0];
    st.t = first ? first.a + 0.3 : 0;
    load();
    R.replay = {
      setTime, time: () => st.t, slider,
      select(variant, rep) { vsel.value = String(vs.findIndex(x => x.name === variant)); fillReps(); rsel.value = String(rep || 0); load(); },
      linkColour: id => { const l = fabric.querySelector(`[data-link="${CSS.escape(id)}"]`); return l && l.getAttribute("stroke"); },
      linkState: id => { const l = fabric.querySelector(`[data-link="${CSS.escape(id)}"]`); return l && l.getAttribute("data-state"); },
    };
  }

  // --- lateness ----------------------------------------------------------------------------------------------------
  function lateness() {
    const box = document.getElementById("lateness-box");
    const FIG = [["longest_gap_ms", "longest gap"], ["converged_gap_ms", "converged"], ["routes_last_ms", "routes"],
                 ["recovery_after_repair_ms", "recovery"]];
    const rows = [];
    D.variants.forEach(v => v.runs.forEach(r => r.lateness.forEach((lt, fi) => {
      if (!lt) return;
      rows.push(h("tr", { class: fi === 0 && r.rep === 1 ? "group" : null },
        h("td", { class: "l", text: fi === 0 && r.rep === 1 ? v.name : "" }), h("td", { class: "l", text: r.faults[fi].label }),
        h("td", { text: r.rep }),
        FIG.map(([k]) => {
          const f = lt.figures[k];
          return h("td", { class: f && f.flagged ? "flag" : null, text: f ? `${fmt(f.late_ms, "")} / ${fmt(f.bound_ms, "")}` : "–" });
        }),
        h("td", { class: lt.flagged ? "flag" : "ok", text: lt.flagged ? "FLAG" : "no" }),
        h("td", { text: fmt(r.emulator.psi_some_pct, " %") })));
    })));
    if (!rows.length) { box.append(h("div", { class: "note", text: "no fault was judged" })); return; }
    box.append(h("div", { class: "scroll" }, h("table", { class: "data" }, h("thead", {}, h("tr", {},
      h("th", { class: "l", text: "variant" }), h("th", { class: "l", text: "fault" }), h("th", { text: "rep" }),
      FIG.map(([k, t]) => h("th", { title: `${k}: the emulator's lateness in that figure's window / the bound it is judged against (ms)`, text: `${t} late/bound ms` })),
      h("th", { text: "flagged" }),
      h("th", { title: "CPU pressure over the whole repetition: the share of it during which a runnable task waited for a CPU", text: "PSI some" }))),
      h("tbody", {}, rows))));
  }

  // --- provenance --------------------------------------------------------------------------------------------------
  function provenance() {
    const p = D.provenance, m = p.machine || {};
    const cores = m.cores && typeof m.cores === "object" ? `${m.cores.usable} usable of ${m.cores.online} online` : m.cores;
    const dirty = Array.isArray(p.dirty_paths) && p.dirty_paths.length ? ` (${p.dirty_paths.join(", ")})` : "";
    const items = [["experiment file", p.file], ["commit", p.commit], ["dirty", p.dirty == null ? null : String(p.dirty) + dirty],
      ["hpnlab", p.version], ["run started", p.started], ["run finished", p.finished], ["re-analysed", p.reanalysed],
      ["runtime", p.runtime], ["kernel", m.kernel], ["kernel TCP default", m.kernel_tcp_default], ["FRR", m.frr],
      ["Python", m.python], ["cores", cores]];
    document.getElementById("provenance-box").append(h("dl", { class: "prov" },
      items.filter(([, x]) => x != null && x !== "").map(([k, x]) => [h("dt", { text: k }), h("dd", { text: String(x) })])));
  }

  header();
  summary();
  variants();
  timelines();
  replay();
  lateness();
  provenance();
  R.ready = true;
})();
