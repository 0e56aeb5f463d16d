// attnviz needle page: the grid of recall, the heads' retrieval scores, and one run's answer attention (the
// long-context matrix and the one-token view). Data: the JSON in #needle-data (attnviz.needle.page).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("needle-data").textContent);
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(t) {  // viridis at a few stops, interpolated
    const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x)), f = x - i;
    return STOPS[i].map((v, k) => Math.round(v + (STOPS[i + 1][k] - v) * f));
  }
  const css = (rgb) => "rgb(" + rgb.join(",") + ")";
  function recallColour(v) {  // red → yellow → green, as the PNG's RdYlGn
    if (v === null) return "#eee";
    const a = [215, 48, 39], b = [254, 224, 139], c = [26, 152, 80];
    const [p, q, f] = v < 0.5 ? [a, b, v / 0.5] : [b, c, (v - 0.5) / 0.5];
    return css(p.map((x, k) => Math.round(x + (q[k] - x) * f)));
  }
  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const bytesOf = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const pct = (v) => (v === null ? "·" : String(Math.round(v * 100)));
  const state = { run: null, head: data.shown.length > 1 ? data.shown[1] : data.shown[0], step: 0 };

  // The grid of recall: depth (rows) × length (columns); a click opens the run.
  const grid = document.getElementById("needlegrid");
  grid.className = "grid";
  const head = el("tr");
  head.appendChild(el("th", {}, "depth \\ tokens"));
  for (const n of data.lengths) head.appendChild(el("th", {}, n.toLocaleString("en")));
  grid.appendChild(head);
  const cellOf = new Map();
  data.depths.forEach((depth, i) => {
    const tr = el("tr");
    tr.appendChild(el("th", {}, Math.round(depth * 100) + "%"));
    data.lengths.forEach((length, j) => {
      const index = j * data.depths.length + i;  // the runs go length by length, depth by depth
      const v = data.success[i][j];
      const td = el("td", { class: "cell", tabindex: "0", "data-run": String(index),
        title: "depth " + Math.round(depth * 100) + "%, " + length + " tokens: recall " + pct(v) + "%" }, pct(v));
      td.style.background = recallColour(v);
      if (index >= 0) {
        td.addEventListener("click", () => openRun(index));
        td.addEventListener("keydown", (e) => { if (e.key === "Enter") openRun(index); });
        cellOf.set(index, td);
      }
      tr.appendChild(td);
    });
    grid.appendChild(tr);
  });

  // The heads' retrieval scores: layers × heads; a shown head's cell picks it for the run's views.
  const hgrid = document.getElementById("headgrid");
  hgrid.className = "grid";
  const top = Math.max(1e-9, ...data.scores.retrieval.flat());
  const htr = el("tr");
  htr.appendChild(el("th"));
  for (let h = 0; h < data.n_heads; h++) htr.appendChild(el("th", {}, data.n_heads > 24 && h % 4 ? "" : String(h)));
  hgrid.appendChild(htr);
  const headCells = new Map();
  data.scores.retrieval.forEach((row, layer) => {
    const tr = el("tr");
    tr.appendChild(el("th", {}, "L" + layer));
    row.forEach((v, h) => {
      const name = headName(layer, h);
      const td = el("td", { class: "cell", title: name + ": retrieval " + v.toFixed(3) + ", reasoning "
        + data.scores.reasoning[layer][h].toFixed(3) }, v.toFixed(2));
      td.style.background = css(colour(v / top));
      td.addEventListener("click", () => pickHead(name));
      headCells.set(name, td);
      tr.appendChild(td);
    });
    hgrid.appendChild(tr);
  });
  const ranked = document.getElementById("ranked");
  for (const h of data.ranked) {
    const li = el("li", { "data-head": h.name }, h.name + "  " + h.retrieval_score.toFixed(3) + " / "
      + h.reasoning_score.toFixed(3) + (h.retrieval ? "  retrieval" : ""));
    li.addEventListener("click", () => pickHead(h.name));
    ranked.appendChild(li);
  }
  function pickHead(name) {
    if (!data.shown.includes(name)) {
      status("The page keeps each run's attention for the " + (data.shown.length - 1) + " best-ranked heads and their mean; "
        + name + " is not among them.");
      return;
    }
    state.head = name;
    draw();
  }

  const panel = document.getElementById("run");
  function status(text) {
    const tip = document.getElementById("tip");
    if (tip) tip.textContent = text;
  }
  function openRun(index) {
    state.run = index;
    state.step = 0;
    draw();
  }

  function draw() {
    for (const [i, td] of cellOf) td.classList.toggle("chosen", i === state.run);
    for (const [name, td] of headCells) td.classList.toggle("chosen", name === state.head);
    for (const li of ranked.children) li.classList.toggle("chosen", li.dataset.head === state.head);
    if (state.run === null) return;
    const run = data.runs[state.run];
    panel.replaceChildren();
    const h2 = el("h2", {}, run.length.toLocaleString("en") + " tokens, needle at " + Math.round(run.depth * 100) + "% ");
    h2.appendChild(el("span", { class: "recall" }, "(tokens " + run.needle[0] + "–" + (run.needle[1] - 1)
      + "): recall " + pct(run.recall) + "%" + (run.retrieved ? ", retrieved" : ", not retrieved")));
    panel.appendChild(h2);
    const answer = el("div", { class: "answer", "aria-label": "answer tokens" });
    answer.appendChild(document.createTextNode("answer: "));
    run.answer_tokens.forEach((t, s) => {
      const b = el("button", { type: "button", class: s === state.step ? "chosen" : "" }, t);
      b.addEventListener("click", () => { state.step = s; draw(); });
      answer.appendChild(b);
    });
    panel.appendChild(answer);
    const controls = el("div", { class: "controls" });
    const label = el("label", {}, "head ");
    const select = el("select", { id: "headpick" });
    for (const name of data.shown) {
      const option = el("option", { value: name }, name === "mean" ? "mean of every head" : name);
      if (name === state.head) option.selected = true;
      select.appendChild(option);
    }
    select.addEventListener("change", () => { state.head = select.value; draw(); });
    label.appendChild(select);
    controls.appendChild(label);
    panel.appendChild(controls);
    const views = el("div", { class: "views" });
    views.appendChild(matrixView(run));
    views.appendChild(oneTokenView(run));
    panel.appendChild(views);
    panel.appendChild(el("div", { id: "tip", "aria-live": "polite" }));
    document.body.dataset.drawn = String(state.run) + ":" + state.head + ":" + state.step;
  }

  // The long-context matrix: each answer token's row over the whole prompt, max-pooled to the columns, each row
  // scaled to its own largest weight; the needle's span between red lines.
  function matrixView(run) {
    const figure = el("figure");
    const steps = run.answer_tokens.length, bins = run.bins, cols = bins + steps;
    figure.appendChild(el("figcaption", {}, "each step of the answer (the row that generated its token) × the prompt's "
      + run.prompt.toLocaleString("en")
      + " tokens" + (run.width > 1 ? " (" + run.width + " per column, max-pooled)" : "")
      + ", then the answer's own; each row scaled to its largest"));
    const gap = 4;
    const cellW = Math.max(1, Math.min(12, Math.floor(900 / cols))), cellH = Math.max(6, Math.min(18, Math.floor(320 / Math.max(1, steps))));
    const answerW = Math.max(cellW, 4);
    const canvas = el("canvas", { id: "matrix", width: bins * cellW + gap + steps * answerW,
      height: Math.max(1, steps) * cellH, "aria-label": "answer attention over the prompt" });
    const ctx = canvas.getContext("2d");
    const cell = run.matrix[state.head], bytes = bytesOf(cell.bytes);
    const xOf = (c) => (c < bins ? c * cellW : bins * cellW + gap + (c - bins) * answerW);
    const widthOf = (c) => (c < bins ? cellW : answerW);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    for (let s = 0; s < steps; s++) for (let c = 0; c < cols; c++) {
      if (c >= bins && c - bins >= s) continue;  // step s reads the s answer tokens fed before it
      ctx.fillStyle = css(colour(bytes[s * cols + c] / 255));
      ctx.fillRect(xOf(c), s * cellH, widthOf(c), cellH);
    }
    ctx.strokeStyle = "#e33"; ctx.lineWidth = 2;
    for (const edge of run.needle) {
      const x = (edge / run.width) * cellW;
      ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, canvas.height); ctx.stroke();
    }
    ctx.strokeStyle = "#fff"; ctx.lineWidth = 1;
    ctx.strokeRect(0.5, state.step * cellH + 0.5, canvas.width - 1, cellH - 1);
    function at(e) {
      const r = canvas.getBoundingClientRect();
      const x = ((e.clientX - r.left) / r.width) * canvas.width, s = Math.floor(((e.clientY - r.top) / r.height) * steps);
      const c = x < bins * cellW ? Math.floor(x / cellW) : x < bins * cellW + gap ? -1 : bins + Math.floor((x - bins * cellW - gap) / answerW);
      return [s, c];
    }
    canvas.addEventListener("mousemove", (e) => {
      const [s, c] = at(e);
      if (s < 0 || s >= steps || c < 0 || c >= cols || (c >= bins && c - bins >= s)) return;
      const weight = (bytes[s * cols + c] / 255) * cell.peaks[s];
      if (c >= bins) {
        status("generating “" + run.answer_tokens[s] + "” → the answer's “" + run.answer_tokens[c - bins] + "”: weight ≈ " + weight.toFixed(4));
        return;
      }
      const first = c * run.width, last = Math.min(run.prompt, first + run.width) - 1;
      status("generating “" + run.answer_tokens[s] + "” → tokens " + first + (last > first ? "–" + last : "") + ": "
        + (run.width > 1 ? "largest " : "") + "weight ≈ " + weight.toFixed(4)
        + (last >= run.needle[0] && first < run.needle[1] ? " (the needle)" : ""));
    });
    canvas.addEventListener("click", (e) => {
      const [s] = at(e);
      if (s >= 0 && s < steps) { state.step = s; draw(); }
    });
    figure.appendChild(canvas);
    return figure;
  }

  // One token: the chosen answer token's row over the prompt (pooled), the keys around the needle by name, its
  // strongest keys.
  function oneTokenView(run) {
    const figure = el("figure", { id: "onetoken" });
    const s = state.step, token = run.answer_tokens[s] || "";
    figure.appendChild(el("figcaption", {}, "generating “" + token + "” (answer token " + (s + 1) + " of "
      + run.answer_tokens.length + "): the attention over the prompt, the needle shaded"));
    const bins = run.bins, cols = bins + run.answer_tokens.length, w = Math.max(300, Math.min(900, bins * 2)), h = 90;
    const canvas = el("canvas", { id: "row", width: w, height: h, "aria-label": "one answer token's attention" });
    const ctx = canvas.getContext("2d");
    const cell = run.matrix[state.head], bytes = bytesOf(cell.bytes);
    ctx.fillStyle = "rgba(221, 51, 51, .18)";
    const x0 = (run.needle[0] / run.prompt) * w, x1 = Math.max(x0 + 2, (run.needle[1] / run.prompt) * w);
    ctx.fillRect(x0, 0, x1 - x0, h);
    ctx.fillStyle = "#3b528b";
    for (let b = 0; b < bins; b++) {
      const v = bytes[s * cols + b] / 255;
      const x = (b / bins) * w, bw = Math.max(1, w / bins);
      ctx.fillRect(x, h - v * (h - 4), bw, v * (h - 4));
    }
    figure.appendChild(canvas);
    const window = run.window.values[state.head];
    if (window) {
      figure.appendChild(el("figcaption", {}, "tokens " + run.window.start + "–" + (run.window.end - 1)
        + " around the needle (underlined), by weight"));
      const strip = el("div", { class: "window" });
      const row = window[s], peak = Math.max(1e-9, ...row);
      row.forEach((v, i) => {
        const p = run.window.start + i;
        const span = el("span", { class: p >= run.needle[0] && p < run.needle[1] ? "needle" : "",
          title: "token " + p + ": " + v.toFixed(4) }, run.labels[String(p)] || "?");
        const rgb = colour(v / peak);
        span.style.background = css(rgb);
        span.style.color = v / peak > 0.55 ? "#000" : "#fff";
        strip.appendChild(span);
      });
      figure.appendChild(strip);
      figure.appendChild(el("figcaption", {}, "its strongest keys"));
      const list = el("ol", { class: "strongest" });
      for (const [p, v] of run.top[state.head][s]) {
        const inside = p >= run.needle[0] && p < run.needle[1];
        const li = el("li", {}, (run.labels[String(p)] || "?") + " (token " + p + ") " + v.toFixed(4));
        if (inside) li.appendChild(el("span", { class: "inside" }, "  in the needle"));
        list.appendChild(li);
      }
      figure.appendChild(list);
    } else {
      figure.appendChild(el("p", { class: "note" }, "Pick a head for the keys around the needle by name and the strongest keys."));
    }
    return figure;
  }

  const first = data.runs.findIndex((r) => r.retrieved);
  openRun(first >= 0 ? first : 0);
})();
