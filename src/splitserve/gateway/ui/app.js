// splitserve dashboard: polls /ui/state about once a second and draws it. No dependencies.
"use strict";
(function () {
  const KEY = "splitserve-key";
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const num = (x) => typeof x === "number" && isFinite(x);
  const MIB = 1024 * 1024;
  function bytes(n) {
    if (!num(n)) return "–";
    const a = Math.abs(n);
    if (a >= 1024 * 1024 * 1024) return (n / (1024 * MIB)).toFixed(2) + " GiB";
    if (a >= MIB) return (n / MIB).toFixed(1) + " MiB";
    if (a >= 1024) return (n / 1024).toFixed(0) + " KiB";
    return n + " B";
  }
  const fix = (x, d = 1) => (num(x) ? x.toFixed(d) : "–");
  const pct = (f) => (f >= 0.095 ? (f * 100).toFixed(0) : f >= 0.001 ? (f * 100).toFixed(1) : "<0.1") + " %";
  const ms = (s) => (num(s) ? (s * 1000).toFixed(0) + " ms" : "–");
  function dur(s) {
    if (!num(s)) return "–";
    if (s < 90) return s.toFixed(0) + " s";
    if (s < 5400) return (s / 60).toFixed(0) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  // -- key handling: asked once, kept in sessionStorage, never shown --------------------------
  function headers() {
    const key = sessionStorage.getItem(KEY);
    return key ? { Authorization: "Bearer " + key } : {};
  }
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $("key-input");
    if (input.value.trim()) sessionStorage.setItem(KEY, input.value.trim());
    input.value = "";
    $("key-form").hidden = true;
    poll();
  });

  // -- drawing ----------------------------------------------------------------------------------
  function bar(parts, total, cls = "bar") {
    // parts: [[value, class]...], drawn stacked against total (SVG: no inline styles, CSP-safe)
    let x = 0, rects = "";
    for (const [v, c] of parts) {
      if (!num(v) || !num(total) || total <= 0) continue;
      const w = Math.max(0, Math.min(100 - x, (v / total) * 100));
      rects += `<rect class="${c}" x="${x.toFixed(2)}" y="0" width="${w.toFixed(2)}" height="10"></rect>`;
      x += w;
    }
    return `<svg class="${cls}" viewBox="0 0 100 10" preserveAspectRatio="none">${rects}</svg>`;
  }

  function statusOf(n) {
    if (n.alive === true) return n.load ? "loading" : "up";
    if (n.alive === false) return "down";
    return "unknown";
  }

  // The worker's RPC transport as its own log says ("RDMA (mtu 4096)", "TCP (cause)"); amber with
  // the RDMA check's warnings in the tooltip when there are any.
  function transport(t) {
    if (!t) return "";
    const warn = (t.warnings || []).length ? "warn" : "";
    return `<br><span class="small transport ${warn}" data-transport="${esc(t.transport)}"
      title="${esc((t.warnings || []).join("\n") || "transport: " + t.text)}">transport: ${esc(t.text)}</span>`;
  }

  function drawNodes(st) {
    const rows = (st.nodes || []).map((n) => {
      const p = n.planned || {}, m = n.measured || {};
      const layers = p.layers ? `${p.layers[0]}–${p.layers[1]}${p.output_layer ? " +out" : ""}` : (n.role === "gateway" ? "" : "–");
      const mem = p.memory_bytes;
      // Both bars on one scale per node, its own footprint (the larger of the two totals), so the
      // split into weights / KV / compute reads at a glance whatever the node's memory; how much of
      // that memory the footprint is goes in the text under them.
      const sum = (xs) => xs.reduce((a, v) => a + (num(v) ? v : 0), 0);
      const used = Math.max(sum([p.weights_bytes, p.kv_bytes, p.compute_bytes]),
        sum([m.model_bytes, m.kv_bytes, m.compute_bytes, m.output_bytes]));
      const bars = n.role === "gateway" ? "" :
        bar([[p.weights_bytes, "w"], [p.kv_bytes, "k"], [p.compute_bytes, "c"]], used) +
        bar([[m.model_bytes, "w"], [m.kv_bytes, "k"], [(m.compute_bytes || 0) + (m.output_bytes || 0), "c"]], used);
      const share = num(mem) && mem > 0 && used > 0 ? ` (${pct(used / mem)})` : "";
      const memText = n.role === "gateway" ? "" : used > 0 ? `${bytes(used)}${num(mem) ? " of " + bytes(mem) + share : ""}` : "–";
      const two = (a, b) => `${bytes(a)} · ${bytes(b)}`;
      let load = "";
      if (n.load) {
        const f = n.load.fraction;
        load = bar([[num(f) ? f : 0, "progress"]], 1) +
          `<span class="small">${bytes(n.load.bytes_sent)} / ${bytes(n.load.expected_bytes)}` +
          (num(n.load.eta_seconds) ? `, ETA ${dur(n.load.eta_seconds)}` : "") + `</span>`;
      }
      const devs = (n.devices || []).map((d) => esc(d.device)).join(", ");
      const status = statusOf(n);
      return `<tr data-node="${esc(n.node)}" data-status="${status}" data-pid="${esc(n.pid)}">
        <td class="who"><b>${esc(n.node)}</b> <span class="muted small">${esc(n.role)}</span><br><span class="muted small">${esc(n.endpoint)}${devs ? " · " + devs : ""}</span></td>
        <td><span class="badge status ${status}">${status}</span></td>
        <td class="layers">${layers}</td>
        <td class="mem">${bars}<span class="small muted">${memText}</span></td>
        <td class="num">${n.role === "gateway" ? "" : two(p.weights_bytes, m.model_bytes)}</td>
        <td class="num">${n.role === "gateway" ? "" : two(p.kv_bytes, m.kv_bytes)}</td>
        <td class="num">${n.role === "gateway" ? "" : two(p.compute_bytes, (m.compute_bytes || 0) + (m.output_bytes || 0))}</td>
        <td class="num">${n.role === "gateway" ? "" : two(p.headroom_bytes, n.headroom_bytes)}</td>
        <td class="num rtt ${n.link && n.link.rtt_status === "warn" ? "warn" : ""}" data-rtt-status="${esc(n.link ? n.link.rtt_status : "")}"
          title="${n.link ? esc(n.link.rtt_meaning + "; over " + n.link.rtt_warn_ms + " ms is a warning, as in preflight") : ""}">${n.link ? fix(n.link.rtt_ms, 3) + " ms" : ""}${transport(n.transport)}</td>
        <td class="load">${load}</td></tr>`;
    });
    $("nodes").tBodies[0].innerHTML = rows.join("") || `<tr><td colspan="10" class="muted">no cluster state found (a gateway started by <code>splitserve up</code> shows its nodes here)</td></tr>`;
    const plan = st.plan || {};
    const s = plan.settings || {};
    $("plan-note").textContent = [
      s.ctx ? `ctx ${s.ctx} × ${s.parallel} slots, KV ${s.cache_type_k}/${s.cache_type_v}` : "",
      plan.tensor_split ? `--tensor-split ${plan.tensor_split.map((x) => +x.toFixed(3)).join(",")}` : "",
      plan.note || ""].filter(Boolean).join(" · ");
  }

  function drawSlots(st) {
    const rows = (st.slots || []).map((s) => {
      const f = s.context_fill;
      return `<tr data-slot="${esc(s.id)}" data-processing="${s.processing}">
        <td>${esc(s.id)}</td><td><span class="badge ${s.processing ? "up" : ""}">${s.processing ? "generating" : "idle"}</span></td>
        <td>${bar([[num(f) ? f : 0, f > 0.9 ? "fill hot" : "fill"]], 1, "bar slot")}<span class="small muted">${s.context_used} / ${s.n_ctx}</span></td>
        <td class="num">${s.prompt_tokens}</td><td class="num">${s.cached_tokens}</td><td class="num">${s.decoded_tokens}</td>
        <td class="num tps">${s.processing && num(s.tokens_per_s) ? fix(s.tokens_per_s) : ""}</td></tr>`;
    });
    $("slots").tBodies[0].innerHTML = rows.join("") || `<tr><td colspan="7" class="muted">no slots</td></tr>`;
    $("slots-error").textContent = st.slots_error ? "engine: " + st.slots_error : "";
  }

  function drawReplicas(st) {
    const reps = st.replicas;
    $("replicas-card").hidden = !reps;
    if (!reps) return;
    const rows = reps.map((r) => {
      const cf = r.cached_fraction;
      return `<tr data-replica="${esc(r.name)}" data-health="${esc(r.health)}">
        <td class="who"><b>${esc(r.name)}</b><br><span class="muted small">${esc(r.url)}</span></td>
        <td><span class="badge status ${esc(r.health)}">${esc(r.health)}</span></td>
        <td class="num load">${r.load} <span class="muted small">(${r.running} + ${r.queued})</span></td>
        <td class="num">${r.sessions ?? "–"}</td><td class="num">${r.served ?? "–"}</td><td class="num">${r.errors ?? "–"}</td>
        <td class="num tps">${fix(r.tokens_per_s)}</td>
        <td class="cached">${num(cf) ? bar([[cf, "fill"]], 1, "bar slot") + `<span class="small">${cf > 0 ? pct(cf) : "0 %"}</span>` : "–"}</td></tr>`;
    });
    $("replicas").tBodies[0].innerHTML = rows.join("");
  }

  function drawGateway(st) {
    const g = st.gateway || {};
    const t = g.ttft_seconds || {};
    const byStatus = Object.entries(g.requests_by_status || {}).map(([k, v]) => `${esc(k)}: ${v}`).join(", ") || "none yet";
    const byEp = Object.entries(g.requests_by_endpoint || {}).map(([k, v]) => `${esc(k)}: ${v}`).join(", ") || "–";
    const hit = num(g.prompt_cache_hit_ratio) ? (g.prompt_cache_hit_ratio * 100).toFixed(0) + " %" : "–";
    const items = [
      ["requests by status", byStatus], ["by endpoint", byEp],
      ["TTFT p50 / p90", `${ms(t.p50)} / ${ms(t.p90)} <span class="muted">(${t.count || 0} requests)</span>`],
      ["decode t/s p50 (per request)", fix((g.decode_tps || {}).p50)],
      ["running / queued", `${g.running ?? "–"} / ${g.queue_depth ?? "–"}`],
      ["prompt-cache hits", `${hit} <span class="muted">(${(g.tokens || {}).cached || 0} of ${(g.tokens || {}).prompt || 0} prompt tokens)</span>`],
      ["client disconnects", g.disconnects ?? "–"]];
    $("gateway").innerHTML = items.map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`).join("");
  }

  function drawThroughput(st) {
    const tp = st.throughput || {};
    const series = tp.series || [];
    const el = $("tput");
    const W = Math.max(300, Math.round(el.clientWidth || 600)), H = 160, L = 40, B = 16, R = 8;
    el.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const span = 300;
    let max = 10;
    for (const [, d, p] of series) max = Math.max(max, d, p);
    if (num(tp.decode_bound_tps)) max = Math.max(max, tp.decode_bound_tps);
    max *= 1.1;
    const x = (t) => L + ((t + span) / span) * (W - L - R);
    const y = (v) => H - B - (v / max) * (H - B - 6);
    const path = (i) => series.map((r, j) => `${j ? "L" : "M"}${x(r[0]).toFixed(1)},${y(r[i]).toFixed(1)}`).join("");
    let svg = "";
    for (const f of [0, 0.5, 1]) {
      svg += `<line class="grid" x1="${L}" x2="${W - R}" y1="${y(max * f / 1.1)}" y2="${y(max * f / 1.1)}"></line>` +
        `<text x="${L - 6}" y="${y(max * f / 1.1) + 4}" text-anchor="end">${(max * f / 1.1).toFixed(0)}</text>`;
    }
    for (const t of [-300, -240, -180, -120, -60, 0]) {
      const anchor = t === -300 ? "start" : t === 0 ? "end" : "middle"; // the ends stay inside the frame
      svg += `<text x="${x(t)}" y="${H - 3}" text-anchor="${anchor}">${t ? t / 60 + " min" : "now"}</text>`;
    }
    if (num(tp.decode_bound_tps)) svg += `<line class="b" x1="${L}" x2="${W - R}" y1="${y(tp.decode_bound_tps)}" y2="${y(tp.decode_bound_tps)}"></line>`;
    if (series.length > 1) svg += `<path class="p" d="${path(2)}"></path><path class="d" d="${path(1)}"></path>`;
    $("tput").innerHTML = svg;
    $("tput-now").innerHTML = `now: decode <b>${fix(tp.decode_tps)}</b> t/s, prefill <b>${fix(tp.prefill_tps)}</b> t/s` +
      (num(tp.decode_bound_tps) ? ` · planner's decode bound ${fix(tp.decode_bound_tps)} t/s` : " · no decode bound (set device_kind or bandwidth_gbps on the workers)");
  }

  function drawWarnings(st) {
    const items = (st.warnings || []).map((w) => {
      const when = num(w.time) ? new Date(w.time * 1000).toLocaleTimeString() + " " : "";
      return `<li class="${esc(w.kind)}"><span class="src">${esc(w.source)}</span> <span class="muted">${when}${esc(w.kind)}</span> ${esc(w.text)}${w.fix ? ` <span class="muted">→ ${esc(w.fix)}</span>` : ""}</li>`;
    });
    $("warnings").innerHTML = items.join("") || `<li class="muted">none</li>`;
  }

  // A report.md in a few lines: headings, bullet lists, pipe tables; everything escaped.
  function markdown(lines) {
    let out = "", table = [], list = [];
    const inline = (s) => esc(s).replace(/`([^`]+)`/g, "<code>$1</code>").replace(/\*\*([^*]+)\*\*/g, "<b>$1</b>");
    const flush = () => {
      if (table.length) {
        const rows = table.filter((r) => !/^\|[\s:|-]+\|$/.test(r.trim()));
        out += `<div class="table-box"><table>` + rows.map((r, i) => "<tr>" + r.trim().replace(/^\||\|$/g, "").split("|")
          .map((c) => (i ? "<td>" : "<th>") + inline(c.trim()) + (i ? "</td>" : "</th>")).join("") + "</tr>").join("") + "</table></div>";
        table = [];
      }
      if (list.length) { out += "<ul>" + list.map((l) => `<li>${inline(l)}</li>`).join("") + "</ul>"; list = []; }
    };
    // Images come separately; a heading left with nothing under it (the report's "Plots") goes too.
    lines = lines.filter((l) => !/^!\[/.test(l));
    const level = (l) => (/^(#+) /.exec(l) || ["", ""])[1].length;
    lines = lines.filter((l, i) => {
      if (!level(l)) return true;
      const next = lines.slice(i + 1).find((n) => n.trim());
      return next !== undefined && !(level(next) && level(next) <= level(l));
    });
    for (const line of lines) {
      if (line.startsWith("|")) { if (list.length) flush(); table.push(line); continue; }
      if (/^\s*- /.test(line)) { if (table.length) flush(); list.push(line.replace(/^\s*- /, "")); continue; }
      flush();
      if (/^#+ /.test(line)) out += `<h4>${inline(line.replace(/^#+ /, ""))}</h4>`;
      else if (line.trim()) out += `<p class="small">${inline(line)}</p>`;
    }
    flush();
    return out;
  }

  const shown = {};
  async function drawRun(kind, run, el) {
    if (!run) { el.innerHTML = `<p class="muted">none found</p>`; shown[kind] = null; return; }
    const sig = run.path + "|" + run.images.map((i) => i.name).join(",") + "|" + run.report.length;
    if (shown[kind] === sig) return;
    shown[kind] = sig;
    el.innerHTML = `<p class="muted small">${esc(run.path)}</p><div class="imgs"></div>` + markdown(run.report || []);
    const imgs = el.querySelector(".imgs");
    for (const im of run.images || []) {
      try {
        const resp = await fetch("/ui/file/" + encodeURIComponent(im.id), { headers: headers() });
        if (!resp.ok) continue;
        const img = document.createElement("img");
        img.alt = im.name;
        // a wide plot (several panels side by side) takes a row of its own, at its own size
        img.addEventListener("load", () => img.classList.toggle("wide", img.naturalWidth > 900));
        img.src = URL.createObjectURL(await resp.blob());
        imgs.appendChild(img);
      } catch (e) { /* the next change of the run redraws */ }
    }
  }

  function draw(st) {
    const c = st.cluster;
    $("cluster-name").textContent = c ? c.name : "no cluster state";
    const phase = c ? (c.phase === "starting" && c.load_stage ? "loading" : c.phase) : "gateway only";
    $("phase").textContent = c ? (phase === "loading" ? "loading: " + c.load_stage : phase) : phase;
    $("phase").className = "badge " + (c ? phase : "");
    $("model").textContent = c ? c.model.split("/").pop() + (num(c.uptime_seconds) ? ` · up ${dur(c.uptime_seconds)}` : "") + (c.restarts ? ` · ${c.restarts} restart(s)` : "") : "";
    drawNodes(st); drawReplicas(st); drawSlots(st); drawGateway(st); drawThroughput(st); drawWarnings(st);
    drawRun("bench", (st.runs || {}).bench, $("run-bench"));
    drawRun("eval", (st.runs || {}).eval, $("run-eval"));
    $("updated").textContent = "updated " + new Date(st.time * 1000).toLocaleTimeString();
    document.body.dataset.rendered = "1";
  }

  let timer = null;
  async function poll() {
    clearTimeout(timer);
    try {
      const resp = await fetch("/ui/state", { headers: headers(), cache: "no-store" });
      if (resp.status === 401) {
        sessionStorage.removeItem(KEY);
        $("key-form").hidden = false;
        $("banner").hidden = true;
        return; // waits for the key
      }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      draw(await resp.json());
      $("banner").hidden = true;
    } catch (e) {
      $("banner").textContent = "the gateway does not answer (" + e.message + "); retrying";
      $("banner").hidden = false;
    }
    timer = setTimeout(poll, 1000);
  }
  poll();
})();
