// The atlas page: a layers × heads grid of one statistic's corpus mean, the heads ranked by it, and per head
// the statistic's distribution over the texts and the texts where it is highest. Data: #atlas-data.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("atlas-data").textContent);
  const select = document.getElementById("atlasstat");
  const grid = document.getElementById("atlasgrid");
  const rank = document.getElementById("atlasrank");
  const panel = document.getElementById("atlashead");
  const layers = [...new Set(data.heads.map((h) => h.layer))].sort((a, b) => a - b);
  const nHeads = Math.max(...data.heads.map((h) => h.head)) + 1;
  const byKey = new Map(data.heads.map((h) => [h.layer + "," + h.head, h]));
  let chosen = null;

  // viridis at a few stops, interpolated
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(t) {
    const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x));
    const f = x - i;
    const c = STOPS[i].map((v, k) => Math.round(v + (STOPS[i + 1][k] - v) * f));
    return "rgb(" + c.join(",") + ")";
  }
  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  for (const stat of data.statistics) select.appendChild(el("option", { value: stat }, stat));

  function draw() {
    const stat = select.value;
    const values = data.heads.map((h) => h.means[stat]);
    const lo = Math.min(...values), hi = Math.max(...values);
    grid.replaceChildren();
    const head = el("tr");
    head.appendChild(el("th"));
    for (let h = 0; h < nHeads; h++) head.appendChild(el("th", {}, "H" + h));
    grid.appendChild(head);
    for (const layer of layers) {
      const row = el("tr");
      row.appendChild(el("th", { scope: "row" }, "L" + layer));
      for (let h = 0; h < nHeads; h++) {
        const item = byKey.get(layer + "," + h);
        const value = item ? item.means[stat] : NaN;
        const cell = el("td", { class: "cell", "data-layer": layer, "data-head": h, tabindex: "0",
          title: "L" + layer + " H" + h + ": " + stat + " " + value.toFixed(3),
          "aria-label": "layer " + layer + ", head " + h + ": " + value.toFixed(3) });
        cell.style.background = colour(hi > lo ? (value - lo) / (hi - lo) : 0.5);
        if (chosen && chosen.layer === layer && chosen.head === h) cell.classList.add("chosen");
        cell.addEventListener("click", () => show(item));
        cell.addEventListener("keydown", (e) => { if (e.key === "Enter") show(item); });
        row.appendChild(cell);
      }
      grid.appendChild(row);
    }
    rank.replaceChildren();
    for (const item of [...data.heads].sort((a, b) => b.means[stat] - a.means[stat])) {
      const labels = Object.entries(item.labels).map(([k, v]) => k + " " + Math.round(v * 100) + "%").join(", ");
      const li = el("li", { "data-layer": item.layer, "data-head": item.head },
        "L" + item.layer + " H" + item.head + "  " + item.means[stat].toFixed(3) + (labels ? "  · " + labels : ""));
      li.addEventListener("click", () => show(item));
      rank.appendChild(li);
    }
    if (chosen) show(chosen);
  }

  function show(item) {
    chosen = item;
    const stat = select.value;
    for (const c of grid.querySelectorAll("td.cell")) {
      c.classList.toggle("chosen", Number(c.dataset.layer) === item.layer && Number(c.dataset.head) === item.head);
    }
    panel.replaceChildren(el("h2", {}, "Layer " + item.layer + ", head " + item.head));
    const labels = el("p");
    for (const [name, rate] of Object.entries(item.labels)) {
      labels.appendChild(el("span", { class: "label" }, name + ": " + Math.round(rate * 100) + "% of texts"));
    }
    if (labels.childNodes.length) panel.appendChild(labels);
    // the statistic's distribution over the texts: one bar per bin
    const counts = item.histograms[stat], edges = data.bins[stat];
    const most = Math.max(1, ...counts), W = 320, H = 90, w = W / counts.length;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("width", W); svg.setAttribute("height", H + 16); svg.setAttribute("id", "atlashist");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", stat + " over the texts, from " + edges[0] + " to " + edges[edges.length - 1]);
    counts.forEach((count, i) => {
      const bar = document.createElementNS("http://www.w3.org/2000/svg", "rect");
      const h = (count / most) * H;
      bar.setAttribute("x", i * w + 1); bar.setAttribute("y", H - h); bar.setAttribute("width", w - 2);
      bar.setAttribute("height", h); bar.setAttribute("fill", "#3b528b"); bar.setAttribute("data-count", count);
      const tip = document.createElementNS("http://www.w3.org/2000/svg", "title");
      tip.textContent = edges[i].toFixed(3) + "–" + edges[i + 1].toFixed(3) + ": " + count + " texts";
      bar.appendChild(tip);
      svg.appendChild(bar);
    });
    for (const [x, v, anchor] of [[0, edges[0], "start"], [W, edges[edges.length - 1], "end"]]) {
      const t = document.createElementNS("http://www.w3.org/2000/svg", "text");
      t.setAttribute("x", x); t.setAttribute("y", H + 13); t.setAttribute("text-anchor", anchor);
      t.setAttribute("font-size", "11"); t.textContent = v.toFixed(3);
      svg.appendChild(t);
    }
    panel.appendChild(el("p", {}, stat + " over the " + data.n_texts + " texts (mean " + item.means[stat].toFixed(3) + ")"));
    panel.appendChild(svg);
    panel.appendChild(el("p", {}, "Where this head's " + stat + " is highest:"));
    const list = el("ol", { class: "texts", id: "atlastexts" });
    const view = el("div", { id: "atlasattn" });
    for (const index of item.top_texts[stat]) {
      const li = el("li", { "data-text": index, tabindex: "0" });
      li.appendChild(el("span", { class: "value" }, "#" + index));
      li.appendChild(document.createTextNode(data.texts[String(index)] || "(text " + index + ")"));
      li.addEventListener("click", () => attention(item, index, view));
      li.addEventListener("keydown", (e) => { if (e.key === "Enter") attention(item, index, view); });
      list.appendChild(li);
    }
    panel.appendChild(list);
    panel.appendChild(view);
    const all = el("table");
    for (const s of data.statistics) {
      const tr = el("tr");
      tr.appendChild(el("td", {}, s));
      tr.appendChild(el("td", {}, item.means[s].toFixed(3)));
      all.appendChild(tr);
    }
    panel.appendChild(el("p", {}, "Every statistic's mean:"));
    panel.appendChild(all);
  }

  // One cited text's attention in this head: rows are queries, columns keys (max-pooled past a few dozen tokens).
  function attention(item, index, view) {
    const drawn = (data.attention || {})[String(index)];
    view.replaceChildren();
    if (!drawn || !drawn.heads[item.layer + "," + item.head]) {
      view.appendChild(el("p", { class: "note" }, "(this text's attention is not on the page)"));
      return;
    }
    const bytes = Uint8Array.from(atob(drawn.heads[item.layer + "," + item.head]), (c) => c.charCodeAt(0));
    const side = drawn.side, cell = Math.max(4, Math.floor(320 / side));
    const canvas = el("canvas", { width: side * cell, height: side * cell, id: "atlasmatrix", "data-text": index,
      role: "img", "aria-label": "head L" + item.layer + " H" + item.head + " on text " + index });
    const ctx = canvas.getContext("2d");
    for (let i = 0; i < side; i++) {
      for (let j = 0; j < side; j++) {
        ctx.fillStyle = colour(bytes[i * side + j] / 255);
        ctx.fillRect(j * cell, i * cell, cell, cell);
      }
    }
    view.appendChild(el("p", {}, "Head L" + item.layer + " H" + item.head + " on text #" + index +
      ": rows are queries, columns keys" + (drawn.pool > 1 ? " (max-pooled " + drawn.pool + "×" + drawn.pool + ")" : "") +
      "; the colour is each weight over the largest."));
    view.appendChild(canvas);
    view.appendChild(el("p", { class: "note tokens" }, drawn.tokens.join(" ")));
  }

  select.addEventListener("change", draw);
  draw();
  window.attnvizAtlas = { data: data, show: show };
  document.body.dataset.ready = "1";
})();
