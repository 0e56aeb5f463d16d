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
  const fixed = (v) => (Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(2) : v.toFixed(3));
  const signed = (v) => (v > 0 ? "+" : "") + fixed(v);
  function nameOf(m) { return !diff ? m : m === "js_divergence" ? "JS divergence of the attention" : "Δ " + m; }
  function value(item, m) { return diff ? item.changes[m].mean : item.means[m]; }
  function interval(item, m) {  // a missing number (a statistic undefined on the texts) is null in the data
    const c = item.changes[m], num = (v) => (v === null ? "n/a" : fixed(v));
    return (c.mean === null ? "n/a" : m === "js_divergence" ? fixed(c.mean) : signed(c.mean)) + " [" +
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
  const key = (item, m) => (diff && m !== "js_divergence" ? Math.abs(value(item, m)) : value(item, m));

  for (const m of measures) select.appendChild(el("option", { value: m }, nameOf(m)));

  function draw() {
    const m = select.value;
    const values = data.heads.map((h) => value(h, m));
    const lo = Math.min(...values), hi = Math.max(...values), most = Math.max(...values.map(Math.abs)) || 1;
    const changes = diff && m !== "js_divergence";
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
        const cell = el("td", { class: "cell", "data-layer": layer, "data-head": h, tabindex: "0",
          title: "L" + layer + " H" + h + ": " + m + " " + v.toFixed(3),
          "aria-label": "layer " + layer + ", head " + h + ": " + v.toFixed(3) });
        cell.style.background = paint(v);
        activate(cell, () => show(item));
        row.appendChild(cell);
      }
      grid.appendChild(row);
    }
    rank.replaceChildren();
    const sign = order.value === "asc" ? -1 : 1;
    for (const item of [...data.heads].sort((a, b) => sign * (key(b, m) - key(a, m)))) {
      const labels = diff ? "" : Object.entries(item.labels).map(([k, v]) => k + " " + Math.round(v * 100) + "%").join(", ");
      const li = el("li", { "data-layer": item.layer, "data-head": item.head, tabindex: "0" },
        "L" + item.layer + " H" + item.head + "  " + (diff ? interval(item, m) : item.means[m].toFixed(3)) +
        (labels ? "  · " + labels : ""));
      activate(li, () => show(item));
      rank.appendChild(li);
    }
    if (chosen) show(chosen);
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

  function show(item) {
    chosen = item;
    const m = select.value;
    for (const c of grid.querySelectorAll("td.cell")) {
      c.classList.toggle("chosen", Number(c.dataset.layer) === item.layer && Number(c.dataset.head) === item.head);
    }
    panel.replaceChildren(el("h2", {}, "Layer " + item.layer + ", head " + item.head));
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
    panel.appendChild(el("p", {}, diff ? "Every measure's mean change [95% interval], p:" : "Every statistic's mean:"));
    panel.appendChild(all);
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
    heads.forEach((b64, s) => {
      const bytes = bytesOf(b64);
      const canvas = el("canvas", { width: side * cell, height: side * cell, id: s ? "atlasmatrix" + (s + 1) : "atlasmatrix",
        "data-text": index, role: "img", "aria-label": "head L" + item.layer + " H" + item.head + " on text " + index });
      const ctx = canvas.getContext("2d");
      for (let i = 0; i < side; i++) {
        for (let j = 0; j < side; j++) {
          ctx.fillStyle = colour(bytes[i * side + j] / 255);
          ctx.fillRect(j * cell, i * cell, cell, cell);
        }
      }
      const figure = el("figure");
      figure.appendChild(canvas);
      if (heads.length > 1) figure.appendChild(el("figcaption", {}, s ? data.other : data.model));
      row.appendChild(figure);
    });
    view.appendChild(row);
    view.appendChild(el("p", { class: "note tokens" }, drawn.tokens.join(" ")));
  }

  select.addEventListener("change", draw);
  order.addEventListener("change", draw);
  // atlas_qk.js adds .embedding (a head's queries and keys) to this; the page marks itself ready after both
  const atlas = window.attnvizAtlas = { data: data, show: show, draw: draw, el: el };
  draw();
})();
