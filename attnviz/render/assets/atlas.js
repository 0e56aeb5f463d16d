// The atlas page. A corpus: a layers × heads grid of one statistic's mean, the heads ranked by it, and per head
// the statistic's distribution, the texts where it is highest (each with the head's attention) and the head's
// queries and keys embedded together. A checkpoint diff (data.kind "diff"): the same for each head's change.
// Data: #atlas-data; the embedding is atlas_qk.js's.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("atlas-data").textContent);
  const diff = data.kind === "diff";
  const measures = diff ? data.measures : data.statistics;
  const select = document.getElementById("atlasstat");
  const order = document.getElementById("atlasorder");
  const grid = document.getElementById("atlasgrid");
  const rank = document.getElementById("atlasrank");
  const legend = document.getElementById("atlaslegend");
  const panel = document.getElementById("atlashead");
  const layers = [...new Set(data.heads.map((h) => h.layer))].sort((a, b) => a - b);
  const nHeads = Math.max(...data.heads.map((h) => h.head)) + 1;
  const byKey = new Map(data.heads.map((h) => [h.layer + "," + h.head, h]));
  const SVG = "http://www.w3.org/2000/svg";
  let chosen = null;

  // viridis at a few stops, interpolated; a diverging blue–white–red for changes
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(t) {
    const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x));
    const f = x - i;
    return "rgb(" + STOPS[i].map((v, k) => Math.round(v + (STOPS[i + 1][k] - v) * f)).join(",") + ")";
  }
  function diverging(t) {  // t in [-1, 1]
    const s = Math.min(1, Math.abs(t)), end = t < 0 ? [33, 102, 172] : [178, 24, 43];
    return "rgb(" + end.map((v) => Math.round(255 + (v - 255) * s)).join(",") + ")";
  }
  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }
  const bytesOf = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  // From two exports' tables, heads are ranked by their largest |d_z|: a measure of its own, the default
  const RANKED = "ranked";
  function nameOf(m) {
    if (m === RANKED) return "change as ranked (largest |d_z| of a statistic)";
    return !diff ? m : m === "js_divergence" ? "JS divergence of the attention" : "Δ " + m;
  }
  function value(item, m) { return m === RANKED ? item.score : diff ? item.changes[m].mean : item.means[m]; }
  // what a head's distribution and texts show under a measure: the ranked measure shows the statistic it ranks on
  const shownAs = (item, m) => (m === RANKED ? (item.strongest && item.strongest.statistic) || measures[0] : m);
  function interval(item, m) {  // a missing number (a statistic undefined on the texts) is null in the data
    if (m === RANKED) return (diff && item.strongest ? item.strongest.statistic + " d_z " +
      (item.strongest.d_z || 0).toFixed(2) + ": " + interval(item, item.strongest.statistic) : "");
    const c = item.changes[m], all = [c.mean, ...c.ci95].filter((v) => v !== null);
    const small = all.length && Math.max(...all.map(Math.abs)) < 1e-3 && all.some((v) => v !== 0);
    const num = (v) => (v === null ? "n/a" : small ? v.toExponential(2) : v.toFixed(3));  // one format throughout
    return (c.mean === null ? "n/a" : (m !== "js_divergence" && c.mean > 0 ? "+" : "") + num(c.mean)) + " [" +
      num(c.ci95[0]) + ", " + num(c.ci95[1]) + "]" + (c.p === null ? "" : ", p " + c.p.toFixed(3)) +
      (c.q === undefined || c.q === null ? "" : ", q " + c.q.toFixed(3));
  }
  function activate(node, action) {  // a click, Enter or Space
    node.addEventListener("click", action);
    node.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); action(); }
    });
  }
  // a change ranks by its size either way; the distance (and a corpus statistic) by its value
  const signedChange = (m) => diff && m !== "js_divergence" && m !== RANKED;
  const key = (item, m) => (signedChange(m) ? Math.abs(value(item, m)) : value(item, m));

  if (diff && !measures.includes("js_divergence")) select.appendChild(el("option", { value: RANKED }, nameOf(RANKED)));
  for (const m of measures) select.appendChild(el("option", { value: m }, nameOf(m)));
  if (diff) {  // a change is ranked by its size, up or down
    order.options[0].textContent = "largest first";
    order.options[1].textContent = "smallest first";
  }

  function draw() {
    const m = select.value;
    const values = data.heads.map((h) => value(h, m));
    const lo = Math.min(...values), hi = Math.max(...values), most = Math.max(...values.map(Math.abs)) || 1;
    const changes = signedChange(m);
    const paint = changes ? (v) => diverging(v / most) : (v) => colour(hi > lo ? (v - lo) / (hi - lo) : 0.5);
    // the colour scale's ends, as numbers: a change runs from −most (blue) through 0 (white) to +most (red)
    const ends = changes ? [-most, most] : [lo, hi];
    const steps = [0, 0.25, 0.5, 0.75, 1].map((t) => paint(ends[0] + t * (ends[1] - ends[0])));
    legend.replaceChildren(el("span", { class: "end" }, ends[0].toFixed(3)),
      el("span", { class: "bar", style: "background: linear-gradient(to right, " + steps.join(", ") + ")",
        role: "img", "aria-label": "colour scale from " + ends[0].toFixed(3) + " to " + ends[1].toFixed(3) }),
      el("span", { class: "end" }, ends[1].toFixed(3)),
      el("span", { class: "note" }, changes ? " (the change; white is none)" : " (" + nameOf(m) + ", corpus mean)"));
    grid.replaceChildren();
    const top = el("tr");
    top.appendChild(el("th"));
    for (let h = 0; h < nHeads; h++) top.appendChild(el("th", {}, "H" + h));
    grid.appendChild(top);
    for (const layer of layers) {
      const row = el("tr");
      row.appendChild(el("th", { scope: "row" }, "L" + layer));
      for (let h = 0; h < nHeads; h++) {
        const item = byKey.get(layer + "," + h);
        if (!item) { row.appendChild(el("td")); continue; }
        const v = value(item, m);
        const focusable = chosen ? chosen === item : layer === layers[0] && h === 0;  // one tab stop: arrows move
        const cell = el("td", { class: "cell", "data-layer": layer, "data-head": h, tabindex: focusable ? "0" : "-1",
          title: headName(layer, h) + ": " + m + " " + v.toFixed(3),
          "aria-label": "layer " + layer + ", head " + h + ": " + v.toFixed(3) });
        cell.style.background = paint(v);
        activate(cell, () => show(item, true));
        cell.addEventListener("keydown", (e) => move(e, layer, h));
        row.appendChild(cell);
      }
      grid.appendChild(row);
    }
    rank.replaceChildren();
    const sign = order.value === "asc" ? -1 : 1;
    let first = true;
    for (const item of [...data.heads].sort((a, b) => sign * (key(b, m) - key(a, m)))) {
      const labels = diff ? "" : Object.entries(item.labels).map(([k, v]) => k + " " + Math.round(v * 100) + "%").join(", ");
      const li = el("li", { "data-layer": item.layer, "data-head": item.head, tabindex: first ? "0" : "-1" },
        headName(item.layer, item.head) + "  " + (diff ? interval(item, m) : item.means[m].toFixed(3)) +
        (labels ? "  · " + labels : ""));
      activate(li, () => show(item, true));
      li.addEventListener("keydown", (e) => {  // one tab stop: ↑ and ↓ walk the ranking
        const next = e.key === "ArrowDown" ? li.nextElementSibling : e.key === "ArrowUp" ? li.previousElementSibling : null;
        if (!next) return;
        e.preventDefault();
        li.tabIndex = -1;
        next.tabIndex = 0;
        next.focus();
      });
      rank.appendChild(li);
      first = false;
    }
    if (chosen) show(chosen);
  }

  function move(e, layer, h) {  // arrow keys walk the grid
    const steps = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    if (!steps) return;
    e.preventDefault();
    const row = Math.min(layers.length - 1, Math.max(0, layers.indexOf(layer) + steps[0]));
    const col = Math.min(nHeads - 1, Math.max(0, h + steps[1]));
    const next = grid.querySelector("td.cell[data-layer='" + layers[row] + "'][data-head='" + col + "']");
    if (next) {
      for (const c of grid.querySelectorAll("td.cell")) c.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    }
  }

  function histogram(counts, edges, label) {
    const most = Math.max(1, ...counts), W = 320, H = 90, w = W / counts.length;
    const svg = svgEl("svg", { width: W, height: H + 16, id: "atlashist", role: "img",
      "aria-label": label + " over the texts, from " + edges[0] + " to " + edges[edges.length - 1] });
    counts.forEach((count, i) => {
      const h = (count / most) * H;
      const bar = svgEl("rect", { x: i * w + 1, y: H - h, width: w - 2, height: h, fill: "#3b528b", "data-count": count });
      const tip = svgEl("title");
      tip.textContent = edges[i].toFixed(3) + "–" + edges[i + 1].toFixed(3) + ": " + count + " texts";
      bar.appendChild(tip);
      svg.appendChild(bar);
    });
    for (const [x, v, anchor] of [[0, edges[0], "start"], [W, edges[edges.length - 1], "end"]]) {
      const t = svgEl("text", { x: x, y: H + 13, "text-anchor": anchor, "font-size": "11" });
      t.textContent = v.toFixed(3);
      svg.appendChild(t);
    }
    return svg;
  }

  function show(item, asked) {
    chosen = item;
    const picked = select.value, m = shownAs(item, picked);
    for (const c of grid.querySelectorAll("td.cell")) {  // the chosen head is the grid's one tab stop
      const here = Number(c.dataset.layer) === item.layer && Number(c.dataset.head) === item.head;
      c.classList.toggle("chosen", here);
      c.tabIndex = here ? 0 : -1;
    }
    const title = el("h2", { tabindex: "-1" }, "Layer " + item.layer + ", head " + item.head);
    panel.replaceChildren(title);
    if (picked === RANKED && item.strongest && item.strongest.statistic) {
      panel.appendChild(el("p", { class: "note" }, "Ranked on " + item.strongest.statistic + " (d_z " +
        item.strongest.d_z.toFixed(2) + "), shown below."));
    }
    if (!diff) {
      const labels = el("p");
      for (const [name, rate] of Object.entries(item.labels)) {
        labels.appendChild(el("span", { class: "label" }, name + ": " + Math.round(rate * 100) + "% of texts"));
      }
      if (labels.childNodes.length) panel.appendChild(labels);
    }
    panel.appendChild(el("p", {}, nameOf(m) + " over the " + data.n_texts + " texts (" +
      (diff ? interval(item, m) : "mean " + item.means[m].toFixed(3)) + ")"));
    panel.appendChild(histogram(item.histograms[m], data.bins[m], nameOf(m)));
    panel.appendChild(el("p", {}, diff ? "Where this head's " + nameOf(m) + " is largest:"
      : "Where this head's " + m + " is highest:"));
    const list = el("ol", { class: "texts", id: "atlastexts" });
    const view = el("div", { id: "atlasattn" });
    for (const index of item.top_texts[m]) {
      const li = el("li", { "data-text": index, tabindex: "0" });
      li.appendChild(el("span", { class: "value" }, "#" + index));
      li.appendChild(document.createTextNode(data.texts[String(index)] || "(text " + index + ")"));
      activate(li, () => attention(item, index, view));
      list.appendChild(li);
    }
    panel.appendChild(list);
    panel.appendChild(view);
    if (data.embedding && data.embedding.heads[item.layer + "," + item.head] && atlas.embedding) {
      atlas.embedding(item, panel);
    }
    const all = el("table", { id: "atlasall" });
    for (const s of measures) {
      const tr = el("tr");
      tr.appendChild(el("td", {}, nameOf(s)));
      tr.appendChild(el("td", {}, diff ? interval(item, s) : item.means[s].toFixed(3)));
      all.appendChild(tr);
    }
    panel.appendChild(el("p", {}, diff ? "Every measure's mean change [95% interval], p, q:" : "Every statistic's mean:"));
    panel.appendChild(all);
    if (asked) {  // a person chose this head: bring its details into sight (on a narrow screen they are below the
      // list, where a title at the window's foot would hide the rest) and focus it
      const top = title.getBoundingClientRect().top;
      if (top < 0 || top > window.innerHeight / 3) title.scrollIntoView({ block: "start" });
      title.focus({ preventScroll: true });  // Tab goes on to its texts; Shift-Tab back to where it was chosen
    }
  }

  // One cited text's attention in this head, in each model on one scale: rows are queries, columns keys.
  function attention(item, index, view) {
    const drawn = (data.attention || {})[String(index)];
    view.replaceChildren();
    const heads = drawn && drawn.heads[item.layer + "," + item.head];
    if (!heads) {
      view.appendChild(el("p", { class: "note" }, diff && !data.attention
        ? "(the page has no attention: it was made from two exports' tables; give atlas the file of texts to run both models)"
        : "(this text's attention is not on the page)"));
      return;
    }
    const side = drawn.side, cell = Math.max(4, Math.floor((heads.length > 1 ? 220 : 320) / side));
    view.appendChild(el("p", {}, "Head L" + item.layer + " H" + item.head + " on text #" + index +
      ": rows are queries, columns keys" + (drawn.pool > 1 ? " (max-pooled " + drawn.pool + "×" + drawn.pool + ")" : "") +
      "; the colour is each weight over the largest" + (heads.length > 1 ? " in either model." : ".")));
    const row = el("div", { class: "pair" });
    const planes = heads.map(bytesOf);
    const tip = el("p", { class: "note", id: "atlasattntip" }, "Point at a cell for its tokens and weight.");
    const span = (i) => {  // the tokens of pooled row or column i
      const a = i * drawn.pool, b = Math.min(drawn.tokens.length, a + drawn.pool) - 1;
      return a === b ? "“" + drawn.tokens[a] + "” (" + a + ")" : "tokens " + a + "–" + b + " (“" + drawn.tokens[a] + "” …)";
    };
    // each model's picture and, for two, the second minus the first (red: more weight, blue: less)
    const pictures = planes.map((plane, s) => [s ? data.other : data.model, (k) => colour(plane[k] / 255),
      (k) => plane[k] / 255]);
    if (planes.length === 2) {
      pictures.push([data.other + " − " + data.model, (k) => diverging((planes[1][k] - planes[0][k]) / 255),
        (k) => (planes[1][k] - planes[0][k]) / 255]);
    }
    pictures.forEach(([caption, paint, weight], s) => {
      const canvas = el("canvas", { width: side * cell, height: side * cell, id: s ? "atlasmatrix" + (s + 1) : "atlasmatrix",
        "data-text": index, role: "img", "aria-label": "head L" + item.layer + " H" + item.head + " on text " + index +
        (pictures.length > 1 ? ", " + caption : "") });
      const ctx = canvas.getContext("2d");
      for (let i = 0; i < side; i++) {
        for (let j = 0; j < side; j++) {
          ctx.fillStyle = paint(i * side + j);
          ctx.fillRect(j * cell, i * cell, cell, cell);
        }
      }
      canvas.addEventListener("mousemove", (e) => {
        const r = canvas.getBoundingClientRect();
        const i = Math.floor(((e.clientY - r.top) / r.height) * side), j = Math.floor(((e.clientX - r.left) / r.width) * side);
        if (i < 0 || j < 0 || i >= side || j >= side) return;
        const w = weight(i * side + j);
        tip.textContent = "query " + span(i) + " → key " + span(j) + ": " + (s === 2 ? (w > 0 ? "+" : "") : "") +
          (w * 100).toFixed(0) + "% of the largest" + (pictures.length > 1 ? " (" + caption + ")" : "");
      });
      const figure = el("figure");
      figure.appendChild(canvas);
      if (pictures.length > 1) figure.appendChild(el("figcaption", {}, caption));
      row.appendChild(figure);
    });
    view.appendChild(row);
    view.appendChild(tip);
    view.appendChild(el("p", { class: "note tokens" }, drawn.tokens.join(" ")));
  }

  select.addEventListener("change", draw);
  order.addEventListener("change", draw);
  // atlas_qk.js adds .embedding (a head's queries and keys) to this; the page marks itself ready after both
  const atlas = window.attnvizAtlas = { data: data, show: show, draw: draw, el: el };
  draw();
})();
