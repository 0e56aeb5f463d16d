// attnviz kv page: the runs and their curves, the heads × keys matrix of what the future needs with the chosen run's
// kept keys overlaid (zoomable on the keys), and the chosen head's dropped keys. Data: #kv-data (attnviz.kv.page).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("kv-data").textContent);
  const bytesOf = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const need = bytesOf(data.need);
  const kept = data.runs.map((r) => bytesOf(r.kept));
  const rows = data.n_layers * data.n_kv_heads, bins = data.bins;
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function viridis(t) {
    const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x)), f = x - i;
    return STOPS[i].map((v, k) => Math.round(v + (STOPS[i + 1][k] - v) * f));
  }
  const colour = (policy) => data.colours[policy] || "#555";  // the PNG's colours (attnviz.render.kv.policy_colour)
  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const budget = (run) => run.budget_label;  // "1" is one key, "100%" every key: Python tells them apart
  const state = { run: 0, row: 0, lo: 0, hi: bins };
  // Absolute attention, on one scale for every head: a head that spreads its attention evenly needs no key much.
  const peaks = data.need_peaks.flat(), top = Math.max(1e-12, ...peaks), even = 1 / data.n_context;
  const mass = (row, b) => (need[row * bins + b] / 255) * peaks[row];
  const NEEDED = 4;  // a dropped key the future gives more than 4 times an even share is drawn red

  // The runs: a row each; a click picks the run the matrix overlays.
  const table = document.getElementById("runs");
  const head = el("tr");
  for (const name of ["policy", "budget", "keys", "recall", "error", "KL", "answer"]) head.appendChild(el("th", {}, name));
  table.appendChild(head);
  data.runs.forEach((run, i) => {
    const tr = el("tr", { "data-run": String(i), tabindex: "0" });
    const keys = Math.min(...run.keys) === Math.max(...run.keys) ? String(run.keys[0])
      : Math.min(...run.keys) + "–" + Math.max(...run.keys);
    const cells = [run.policy, budget(run), keys, run.recall.toFixed(3), run.error.toFixed(3),
      run.kl === null ? "—" : run.kl.toFixed(4), run.changed === null ? "—" : run.changed ? "changed" : "same"];
    cells.forEach((text, k) => {
      const td = el("td", k === 6 && run.changed ? { class: "changed" } : {}, text);
      tr.appendChild(td);
    });
    tr.addEventListener("click", () => { state.run = i; draw(); });
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter") { state.run = i; draw(); } });
    table.appendChild(tr);
  });

  // The curves: recall (mean over heads) against the keys kept, a line per policy.
  function curves() {
    const canvas = document.getElementById("curves"), ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, left = 40, bottom = 30, top = 10, right = 100;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#999"; ctx.fillStyle = "#555"; ctx.font = "11px sans-serif";
    ctx.beginPath(); ctx.moveTo(left, top); ctx.lineTo(left, h - bottom); ctx.lineTo(w - right, h - bottom); ctx.stroke();
    const x = (share) => left + share * (w - left - right), y = (v) => h - bottom - v * (h - top - bottom);
    for (const v of [0, 0.5, 1]) ctx.fillText(v.toFixed(1), 8, y(v) + 4);
    for (const s of [0, 0.5, 1]) ctx.fillText(Math.round(s * 100) + "%", x(s) - 10, h - bottom + 14);
    ctx.fillText("keys kept (% of the prompt)", left + 60, h - 4);
    const policies = [...new Set(data.runs.map((r) => r.policy))];
    policies.forEach((policy, k) => {
      const points = data.runs.map((r, i) => [r, i]).filter(([r]) => r.policy === policy)
        .map(([r, i]) => [r.keys.reduce((a, b) => a + b, 0) / r.keys.length / data.n_context, r.recall, i])
        .sort((a, b) => a[0] - b[0]);
      ctx.strokeStyle = ctx.fillStyle = colour(policy);
      ctx.beginPath();
      points.forEach(([s, r], j) => (j ? ctx.lineTo(x(s), y(r)) : ctx.moveTo(x(s), y(r))));
      ctx.stroke();
      for (const [s, r, i] of points) {
        ctx.beginPath(); ctx.arc(x(s), y(r), i === state.run ? 4 : 2, 0, 7); ctx.fill();
      }
      ctx.fillText(policy, w - right + 8, top + 12 + 14 * k);
    });
  }

  // The matrix: rows are (layer, key/value head), columns the keys state.lo … state.hi − 1 (bins of data.width keys).
  const canvas = document.getElementById("matrix");
  const rowH = Math.max(4, Math.min(18, Math.floor(320 / rows)));
  canvas.height = rows * rowH;
  function matrix() {
    const ctx = canvas.getContext("2d"), w = canvas.width;
    const image = ctx.createImageData(w, canvas.height), run = kept[state.run];
    const span = state.hi - state.lo;
    for (let r = 0; r < rows; r++) {
      for (let px = 0; px < w; px++) {
        const b0 = state.lo + Math.floor((px * span) / w), b1 = Math.max(b0 + 1, state.lo + Math.floor(((px + 1) * span) / w));
        let v = 0, k = 255, lost = 0;
        for (let b = b0; b < b1 && b < bins; b++) {
          const m = mass(r, b), keep = run[r * bins + b];
          v = Math.max(v, m);
          k = Math.min(k, keep);
          if (keep === 0) lost = Math.max(lost, m);
        }
        const t = Math.sqrt(v / top);
        let rgb;
        if (lost > NEEDED * even) rgb = [221, 51, 51];  // needed, dropped
        else if (k > 0) rgb = viridis(t);
        else { const g = Math.round(235 - 60 * t); rgb = [g, g, g]; }
        for (let y = 0; y < rowH; y++) {
          const at = ((r * rowH + y) * w + px) * 4;
          image.data[at] = rgb[0]; image.data[at + 1] = rgb[1]; image.data[at + 2] = rgb[2];
          image.data[at + 3] = y === rowH - 1 && rowH > 5 ? 200 : 255;
        }
      }
    }
    ctx.putImageData(image, 0, 0);
    ctx.strokeStyle = "#d33"; ctx.lineWidth = 2;
    ctx.strokeRect(1, state.row * rowH + 1, w - 2, rowH - 1);
    axes();
    document.body.dataset.drawn = state.run + ":" + state.row + ":" + state.lo + "-" + state.hi;
  }
  // The axes: each row's layer and key/value head beside it (every layer's first row when rows are thin), and the
  // positions of the first and last keys in view under it.
  function axes() {
    const labels = document.getElementById("rowlabels"), shown = canvas.clientHeight / rows;
    const each = shown >= 9 ? 1 : data.n_kv_heads;
    if (labels.dataset.rows !== String(shown)) {
      labels.replaceChildren();
      for (let r = 0; r < rows; r += each) {
        const layer = Math.floor(r / data.n_kv_heads), text = each === 1 ? "L" + layer + " · KV" + (r % data.n_kv_heads)
          : "L" + layer;
        const div = el("div", { title: rowName(r) }, text);
        div.style.height = shown * each + "px";
        div.style.fontSize = Math.min(11, Math.max(7, shown * each - 1)) + "px";
        labels.appendChild(div);
      }
      labels.dataset.rows = String(shown);
    }
    const first = state.lo * data.width, last = Math.min(data.n_context, state.hi * data.width) - 1;
    document.getElementById("keyfirst").textContent = "key " + first.toLocaleString("en");
    document.getElementById("keylast").textContent = "key " + last.toLocaleString("en");
  }
  window.addEventListener("resize", axes);
  function at(e) {
    const r = canvas.getBoundingClientRect();
    const px = ((e.clientX - r.left) / r.width) * canvas.width, py = ((e.clientY - r.top) / r.height) * canvas.height;
    return [Math.floor(py / rowH), state.lo + Math.floor((px / canvas.width) * (state.hi - state.lo)), px];
  }
  const rowName = (r) => "layer " + Math.floor(r / data.n_kv_heads) + ", key/value head " + (r % data.n_kv_heads);
  canvas.addEventListener("mousemove", (e) => {
    if (drag) {
      const r = canvas.getBoundingClientRect(), span = state.hi - state.lo;
      const shift = Math.round(((drag.x - e.clientX) / r.width) * span);
      state.lo = Math.max(0, Math.min(bins - span, drag.lo + shift)); state.hi = state.lo + span;
      matrix(); return;
    }
    const [row, b] = at(e);
    if (row < 0 || row >= rows || b < 0 || b >= bins) return;
    const first = b * data.width, last = Math.min(data.n_context, first + data.width) - 1;
    const v = mass(row, b);
    const k = kept[state.run][row * bins + b];
    const label = data.width === 1 ? " “" + data.tokens[first] + "”" : "";
    document.getElementById("tip").textContent = rowName(row) + ": key" + (last > first ? "s " + first + "–" + last : " " + first)
      + label + ", the future's attention ≈ " + v.toFixed(4) + (k === 0 ? ", dropped" : k === 255 ? ", kept" : ", partly kept");
  });
  let drag = null;
  canvas.addEventListener("mousedown", (e) => { drag = { x: e.clientX, lo: state.lo, moved: false }; });
  window.addEventListener("mouseup", (e) => {
    if (drag && Math.abs(e.clientX - drag.x) < 3) {
      const [row] = at(e);
      if (row >= 0 && row < rows) { state.row = row; draw(); }
    }
    drag = null;
  });
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const [, b] = at(e), span = state.hi - state.lo;
    const next = Math.max(Math.min(bins, 16), Math.min(bins, Math.round(span * (e.deltaY > 0 ? 1.5 : 1 / 1.5))));
    const f = (b - state.lo) / span;
    state.lo = Math.max(0, Math.min(bins - next, Math.round(b - f * next))); state.hi = state.lo + next;
    matrix(); strip();
  }, { passive: false });
  canvas.addEventListener("dblclick", () => { state.lo = 0; state.hi = bins; matrix(); strip(); });

  // The chosen head: its loss, the keys dropped that the future needed (by name), and the keys in view by name once
  // few enough are in view.
  const panel = document.getElementById("head");
  function strip() {
    const old = document.getElementById("strip");
    if (old) old.remove();
    const span = state.hi - state.lo;
    if (data.width !== 1 || span > 120) return;
    const box = el("div", { class: "strip", id: "strip", "aria-label": "the keys in view" });
    const run = kept[state.run];
    for (let b = state.lo; b < state.hi; b++) {
      const t = Math.sqrt(mass(state.row, b) / top), k = run[state.row * bins + b];
      const span_ = el("span", { class: k ? "" : "dropped", title: "key " + b + ": " + (k ? "kept" : "dropped") }, data.tokens[b]);
      const rgb = k ? viridis(t) : mass(state.row, b) > NEEDED * even ? [221, 51, 51] : [200, 200, 200];
      span_.style.background = "rgb(" + rgb.join(",") + ")";
      span_.style.color = k && t > 0.55 ? "#000" : k ? "#fff" : "#333";
      box.appendChild(span_);
    }
    panel.appendChild(box);
  }
  function headPanel() {
    const run = data.runs[state.run];
    const loss = run.heads.find((h) => h.layer === Math.floor(state.row / data.n_kv_heads)
      && h.kv_head === state.row % data.n_kv_heads);
    panel.replaceChildren();
    panel.appendChild(el("h2", {}, run.policy + " at " + budget(run) + " · " + rowName(state.row)));
    panel.appendChild(el("p", {}, "recall " + loss.recall.toFixed(3) + " (the future's attention kept), output error "
      + loss.error.toFixed(3) + (run.answer !== null && run.answer !== undefined ? "; answer on this cache: “" + run.answer + "”"
      + (data.full_answer !== null ? " (full cache: “" + data.full_answer + "”)" : "") : "")));
    if (loss.dropped.length) {
      panel.appendChild(el("p", { class: "note" }, "dropped, that the future attended to most:"));
      const list = el("ol");
      for (const [p, t, m] of loss.dropped) list.appendChild(el("li", {}, "“" + t + "” (key " + p + ") " + m.toFixed(4)));
      panel.appendChild(list);
    } else {
      panel.appendChild(el("p", { class: "note" }, "Nothing the future attended to is dropped."));
    }
    strip();
  }

  function draw() {
    for (const tr of table.querySelectorAll("tr[data-run]")) tr.classList.toggle("chosen", Number(tr.dataset.run) === state.run);
    curves();
    matrix();
    headPanel();
  }
  draw();
})();
