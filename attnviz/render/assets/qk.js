// attnviz's query · key view (bertviz's neuron view, as a picture), fitting the window. For one query of one
// head: its vector q, and for each key j the vector k_j and the elementwise product q ⊙ k_j, as rows of
// coloured cells (blue negative, white 0, red positive: one scale for q and k, one for the products, each
// this head's largest magnitude), then the score q·k_j (the sum of the product's cells), the scaled score
// q·k_j / √d and the weight. The cells are canvases, a row each; the tokens and the numbers are DOM text.
// A cell's width follows the window and d; only the keys in sight are drawn (rows placed absolutely in a
// spacer of the full height), so a long context stays quick. page.js calls it with what it shares (ctx)
// and draws through the returned draw().
// eslint-disable-next-line no-unused-vars
function attnvizQK(ctx) {
  "use strict";
  const {K, state, el, fmt, matrix, rowGenerated, colGenerated, showTip, hideTip, onQuery} = ctx;
  const ROW = 20, OVERSCAN = 10, GAP = 6, BLOCK_GAP = 12, MOST_CELL = 16, NUM = 62, WEIGHT = 96;
  const BLOCKS = {both: ["k", "p"], k: ["k"], p: ["p"]};
  const BLOCK_NAMES = {k: "k", p: "q ⊙ k"};
  // A diverging scale (ColorBrewer's RdBu): −1 blue, 0 near-white, +1 red; 257 steps, as CSS colours.
  const STOPS = [[33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247], [253, 219, 199], [239, 138, 98],
                 [178, 24, 43]];
  const RGB = Array.from({length: 257}, (_, n) => {
    const t = (n / 256) * 6, i = Math.min(5, Math.floor(t)), f = t - i, a = STOPS[i], b = STOPS[i + 1];
    return a.map((x, c) => Math.round(x + (b[c] - x) * f));
  });
  const CSS = RGB.map(([r, g, b]) => `rgb(${r},${g},${b})`);
  // v over the scale's top, its magnitude on a square root (small values still show; the legend says so).
  const step = (v, top) => {
    const t = Math.max(-1, Math.min(1, top > 0 ? v / top : 0));
    return Math.round((Math.sign(t) * Math.sqrt(Math.abs(t)) + 1) * 128);
  };
  const shade = (v, top) => CSS[step(v, top)];
  const tint = (v, top) => shade(0.3 * Math.max(-1, Math.min(1, top > 0 ? v / top : 0)), 1);  // light: text on it
  const num = (v) => (Math.abs(v) >= 1e-3 || v === 0 ? Number(v.toPrecision(4)).toString() : v.toExponential(2));
  const options = {blocks: null, order: "position"};  // blocks: null until chosen (both where they fit)
  const ui = {};
  const scales = new WeakMap();  // a head's {vectors, products}: its largest |q_c|, |k_c| and |q_c k_c|
  let shown = null, serial = 0, frame = 0;

  // --- what stays: the bar (query, blocks, order, legend), the table's head, the rows' spacer -------------
  function build() {
    if (ui.scroll) return;
    const box = document.getElementById("qkbox");
    ui.query = el("select", {id: "query", "aria-label": "the query",
      onchange: (e) => onQuery(+e.target.value)});
    ui.blocks = el("select", {id: "qkblocks", "aria-label": "the vectors shown for each key",
      onchange: (e) => { options.blocks = e.target.value; layout(); }});
    for (const [value, text] of [["both", "k and q ⊙ k"], ["k", "k only"], ["p", "q ⊙ k only"]]) {
      ui.blocks.append(el("option", {value}, text));
    }
    ui.order = el("select", {id: "qkorder", "aria-label": "the keys' order",
      onchange: (e) => { options.order = e.target.value; arrange(); layout(); }});
    ui.order.append(el("option", {value: "position"}, "by position"), el("option", {value: "weight"}, "strongest first"));
    ui.legend = el("canvas", {width: 120, height: 10, role: "img", "aria-label": "colour scale: blue negative, white 0, red positive"});
    const g = ui.legend.getContext("2d");
    for (let x = 0; x < 120; x++) { g.fillStyle = shade((x / 119) * 2 - 1, 1); g.fillRect(x, 0, 1, 10); }
    ui.legendText = el("span", {id: "qklegendtext"});
    ui.bar = el("div", {class: "qkbar"},
      el("label", {}, "query ", ui.query), el("span", {class: "qkkeys"}, "(← → move it)"),
      el("label", {}, "show ", ui.blocks), el("label", {}, "keys ", ui.order),
      el("span", {class: "qklegend"}, el("span", {}, "−"), ui.legend, el("span", {}, "+"), ui.legendText));
    ui.info = el("p", {class: "hint qkinfo", id: "qkinfo", "aria-live": "polite"});
    ui.note = el("div", {id: "qknote"});
    ui.titles = el("div", {class: "qkgrid qktitles", role: "row"});
    ui.qrow = el("div", {class: "qkgrid qkq", role: "row"});
    ui.head = el("div", {class: "qkhead", role: "rowgroup"}, ui.titles, ui.qrow);
    ui.space = el("div", {class: "qkspace", role: "rowgroup"});
    ui.scroll = el("div", {class: "qkscroll", tabindex: 0, role: "table", "aria-label": "the query's vector, and each " +
      "key's vector, elementwise product with it, score, scaled score and weight"}, ui.head, ui.space);
    ui.body = el("div", {}, ui.bar, ui.info, ui.note, ui.scroll);
    box.replaceChildren(ui.body);
    ui.scroll.addEventListener("scroll", later);
    window.addEventListener("resize", () => { if (state.view === "qk" && shown) { frame = 0; layout(); } });
    ui.scroll.addEventListener("mousemove", hover);
    ui.scroll.addEventListener("mouseleave", hideTip);
    document.addEventListener("keydown", (event) => {  // ← → : the previous and next query
      if (state.view !== "qk" || !shown || event.altKey || event.ctrlKey || event.metaKey) return;
      if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
      const t = event.target, tag = t && t.tagName;
      if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || (t && t.isContentEditable)) return;
      if (t !== document.body && t !== document.documentElement && !box.contains(t)) return;
      const at = state.query + (event.key === "ArrowRight" ? 1 : -1);
      if (at < 0 || at >= K().rows.length) return;
      event.preventDefault();
      onQuery(at);
    });
  }

  function chooser() {
    const k = K();
    if (ui.query.dataset.kind !== state.kind || ui.query.options.length !== k.rows.length ||
        ui.query.dataset.first !== (k.rows[0] || "")) {
      const name = (t, i) => i + ": " + t + (rowGenerated(i) ? " (generated)" : "");
      ui.query.replaceChildren(...k.rows.map((t, i) => el("option", {value: i}, name(t, i))));
      Object.assign(ui.query.dataset, {kind: state.kind, first: k.rows[0] || ""});
    }
    ui.query.value = state.query;
  }
  function empty(text) {
    shown = null;
    ui.info.textContent = "";
    ui.note.replaceChildren(el("p", {class: "hint"}, text));
    ui.scroll.hidden = true;
    ui.space.replaceChildren();
  }

  function scalesOf(head) {
    if (!scales.has(head)) {
      const d = head.q[0] ? head.q[0].length : 0, mq = new Float64Array(d), mk = new Float64Array(d);
      for (const v of head.q) for (let c = 0; c < d; c++) mq[c] = Math.max(mq[c], Math.abs(v[c]));
      for (const v of head.k) for (let c = 0; c < d; c++) mk[c] = Math.max(mk[c], Math.abs(v[c]));
      let vectors = 0, products = 0;
      for (let c = 0; c < d; c++) { vectors = Math.max(vectors, mq[c], mk[c]); products = Math.max(products, mq[c] * mk[c]); }
      scales.set(head, {vectors: vectors || 1, products: products || 1});
    }
    return scales.get(head);
  }

  async function draw() {
    build();
    const mine = ++serial, data = ctx.data(), k = K();
    const layer = data.qk && data.qk[String(k.layers[state.layer])], head = layer && layer[String(state.head)];
    state.query = Math.max(0, Math.min(state.query, k.rows.length - 1));
    chooser();
    if (!head || !head.q.length) return empty("No query and key vectors for this layer and head.");
    if (head.q.length !== k.rows.length || head.k.length !== k.cols.length) {
      return empty("This page's query and key vectors belong to another attention than this one (their lengths " +
        "differ): choose it above.");
    }
    const m = await matrix(state.kind, state.layer, state.head);
    if (mine !== serial) return;
    const q = head.q[state.query], d = q.length, n = k.cols.length, cols = k.cols.length, root = Math.sqrt(d);
    const dots = new Float64Array(n);
    for (let j = 0; j < n; j++) { const kj = head.k[j]; let s = 0; for (let c = 0; c < d; c++) s += q[c] * kj[c]; dots[j] = s; }
    const weights = m ? m.subarray(state.query * cols, state.query * cols + n) : null;
    let most = 0, strongest = 0;
    for (let j = 0; j < n; j++) {
      most = Math.max(most, Math.abs(dots[j]) / root);
      if (weights ? weights[j] > weights[strongest] : dots[j] > dots[strongest]) strongest = j;
    }
    shown = {head, q, d, n, dots, root, weights, most: most || 1, scale: scalesOf(head), strongest,
             masked: k.causal ? state.query : Infinity, query: state.query, order: null, rows: new Map()};
    arrange();
    ui.scroll.hidden = false;
    const notes = [];
    if (!weights) {
      notes.push("This page holds this head's weights only pooled (a long text), so the weight column is empty " +
        "(—); the matrix view shows them.");
    }
    if (k.causal && state.query < n - 1) notes.push("Keys after the query are dimmed: causal attention masks them (weight 0).");
    ui.note.replaceChildren(...notes.map((t) => el("p", {class: "hint"}, t)));
    const at = k.rows[state.query], best = k.cols[strongest];
    ui.info.textContent = `query ${state.query} “${at}” · d = ${d} · ${n} keys · ` +
      (weights ? `strongest weight: key ${strongest} “${best}”, ${fmt(weights[strongest])}`
        : `largest score: key ${strongest} “${best}”`);
    ui.legendText.textContent = `q and k: ±${num(shown.scale.vectors)} · q ⊙ k: ±${num(shown.scale.products)} ` +
      "(this head's largest; colour on a square root)";
    layout();
  }
  function arrange() {  // the keys' order: by position, or strongest weight (else score) first
    if (!shown) return;
    const order = Array.from({length: shown.n}, (_, j) => j), w = shown.weights, s = shown.dots;
    if (options.order === "weight") order.sort((a, b) => (w ? w[b] - w[a] : 0) || s[b] - s[a] || a - b);
    shown.order = order;
  }

  // --- geometry: the cells' width from the window's, and d ------------------------------------------------
  function geometry() {
    const k = K(), d = shown.d, width = ui.scroll.clientWidth || 900;
    let longest = 4;
    for (const t of k.cols) longest = Math.max(longest, t.length);
    const label = Math.round(Math.max(84, Math.min(150, 7 * longest + 36)));
    const room = Math.max(2 * d, width - label - 2 * NUM - WEIGHT - 4 * GAP - 6);
    const fits = (count) => Math.floor((room - (count - 1) * BLOCK_GAP) / (count * d));
    const mode = options.blocks || (fits(2) >= 2 ? "both" : "p");
    const blocks = BLOCKS[mode], cell = Math.max(1, Math.min(MOST_CELL, fits(blocks.length)));
    ui.blocks.value = mode;
    const block = cell * d, lefts = blocks.map((_, b) => b * (block + BLOCK_GAP));
    const canvasW = blocks.length * block + (blocks.length - 1) * BLOCK_GAP;
    return {label, cell, block, blocks, lefts, canvasW, cols: `${label}px ${canvasW}px ${NUM}px ${NUM}px ${WEIGHT}px`};
  }
  function layout() {
    if (!shown) return;
    const g = shown.g = geometry(), k = K(), s = shown;
    ui.scroll.style.setProperty("--qk-cols", g.cols);
    ui.scroll.style.setProperty("--qk-gap", GAP + "px");
    ui.scroll.setAttribute("aria-rowcount", String(s.n + 2));
    // The titles, over their columns.
    const titles = el("div", {class: "qkblocks", role: "columnheader"});
    g.blocks.forEach((b, i) => {
      const t = el("span", {title: b === "k" ? "the key's vector k_j, a cell per component" :
        "q ⊙ k_j: each component of q times that of k_j; their sum is the score q·k_j"});
      if (b === "k") t.append("k", el("sub", {}, "j"));
      else t.append("q ⊙ k", el("sub", {}, "j"));
      t.style.left = g.lefts[i] + "px"; t.style.width = g.block + "px";
      titles.append(t);
    });
    ui.titles.replaceChildren(el("span", {class: "qktok", role: "columnheader"}, "key"), titles,
      el("span", {class: "num", role: "columnheader", title: "the score: q·k_j, the sum of q ⊙ k_j"}, "q·k"),
      el("span", {class: "num", role: "columnheader", title: `the scaled score: q·k_j / √${s.d}`}, `÷√${s.d}`),
      el("span", {class: "num", role: "columnheader", title: "the attention weight (the softmax of the scaled scores " +
        "over the keys); the bar: its share of 1"}, "weight"));
    // The query's vector, over each block.
    const qc = canvasFor(g, `query ${s.query} “${k.rows[s.query]}”: its vector q, ${s.d} components, coloured`);
    qc.classList.add("qvec");
    paintRow(qc, g, (b, c) => (b === "k" || b === "p" ? s.q[c] : 0), s.scale.vectors, s.scale.vectors);
    ui.qrow.replaceChildren(el("span", {class: "qktok", role: "rowheader", title: `query ${s.query}: ${k.rows[s.query]}`},
      el("i", {}, "q"), el("b", {}, k.rows[s.query])), qc, el("span", {role: "cell"}), el("span", {role: "cell"}),
      el("span", {role: "cell"}));
    ui.space.style.height = s.n * ROW + "px";
    ui.space.replaceChildren();  // every row drawn anew (this query's, at this width)
    s.rows.clear();
    render();
  }
  function canvasFor(g, label) {
    const dpr = window.devicePixelRatio || 1, c = el("canvas", {role: "img", "aria-label": label});
    c.width = Math.round(g.canvasW * dpr); c.height = Math.round((ROW - 2) * dpr);
    c.style.width = g.canvasW + "px"; c.style.height = ROW - 2 + "px";
    Object.assign(c.dataset, {cell: g.cell, x: g.lefts.join(","), blocks: g.blocks.join(",")});
    return c;
  }
  // One row of cells: value(block, c) for each block, on that block's scale (k: the vectors', p: the products').
  function paintRow(canvas, g, value, kScale, pScale) {
    const dpr = window.devicePixelRatio || 1, c = canvas.getContext("2d"), h = ROW - 2, d = shown.d;
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    const inset = g.cell >= 5 ? 1 : 0;
    g.blocks.forEach((b, i) => {
      const x0 = g.lefts[i], top = b === "p" ? pScale : kScale;
      c.fillStyle = "#d2d2d7"; c.fillRect(x0, 0, g.block, h);
      for (let n = 0; n < d; n++) {
        c.fillStyle = shade(value(b, n), top);
        c.fillRect(x0 + n * g.cell + inset, inset, g.cell - inset, h - 2 * inset);
      }
    });
  }

  // --- the rows in sight ----------------------------------------------------------------------------------
  function row(r) {
    const s = shown, g = s.g, k = K(), j = s.order[r], kj = s.head.k[j], masked = j > s.masked;
    const canvas = canvasFor(g, `key ${j} “${k.cols[j]}”: ` + g.blocks.map((b) => (b === "k" ? "its vector k" : "q ⊙ k"))
      .join(" and ") + `, ${s.d} components, coloured`);
    paintRow(canvas, g, (b, c) => (b === "k" ? kj[c] : s.q[c] * kj[c]), s.scale.vectors, s.scale.products);
    const scaled = s.dots[j] / s.root, w = s.weights ? s.weights[j] : null;
    const weight = el("span", {class: "weight", role: "cell", title: w === null ? "not held at this length" : ""});
    if (w !== null) {
      const bar = el("i");
      bar.style.width = Math.max(0, Math.min(100, w * 100)).toFixed(1) + "%";
      weight.append(bar, fmt(w));
    } else weight.append("—");
    const dot = el("span", {class: "dot", role: "cell", title: `q·k = ${s.dots[j]}`}, s.dots[j].toFixed(3));
    const sc = el("span", {class: "scaled", role: "cell", title: `q·k / √${s.d} = ${scaled}`}, scaled.toFixed(3));
    dot.style.background = sc.style.background = tint(scaled, s.most);
    const tok = el("span", {class: "qktok" + ((k.colSpecial || [])[j] ? " special" : "") + (colGenerated(j) ? " generated" : ""),
      role: "rowheader", title: `key ${j}: ${k.cols[j]}`}, el("i", {}, String(j)), el("b", {}, k.cols[j]));
    const node = el("div", {class: "qkgrid qkrow" + (masked ? " masked" : "") + (j === s.query && state.kind !== "cross" ? " own" : "") +
      (j === s.strongest ? " strongest" : ""), role: "row", "data-key": j, "aria-rowindex": r + 3}, tok, canvas, dot, sc, weight);
    node.style.top = r * ROW + "px";
    return node;
  }
  function render() {
    frame = 0;
    const s = shown;
    if (!s || !s.g) return;
    const top = ui.scroll.scrollTop - ui.space.offsetTop, height = ui.scroll.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN), last = Math.min(s.n - 1, Math.ceil((top + height) / ROW) + OVERSCAN);
    for (const [r, node] of s.rows) if (r < first || r > last) { node.remove(); s.rows.delete(r); }
    const added = [];
    for (let r = first; r <= last; r++) if (!s.rows.has(r)) { const node = row(r); s.rows.set(r, node); added.push(node); }
    ui.space.append(...added);
    Object.assign(ui.space.dataset, {first, last, query: s.query, cell: s.g.cell, drawn: "1"});
  }
  const later = () => { if (!frame) frame = requestAnimationFrame(render); };

  // --- the tooltip: a cell's component, q_c, k_c and their product ------------------------------------------
  function hover(event) {
    const canvas = event.target;
    if (!shown || !canvas || canvas.tagName !== "CANVAS") return hideTip();
    const g = shown.g, x = event.clientX - canvas.getBoundingClientRect().left;
    const b = g.lefts.findIndex((left) => x >= left && x < left + g.block);
    if (b < 0) return hideTip();
    const c = Math.floor((x - g.lefts[b]) / g.cell), k = K(), q = shown.q[c];
    const row = canvas.closest(".qkrow");
    if (!row) return showTip(event, `query ${shown.query} “${k.rows[shown.query]}”, component ${c}\nq_${c} = ${num(q)}`);
    const j = +row.dataset.key, kc = shown.head.k[j][c];
    showTip(event, `key ${j} “${k.cols[j]}”, component ${c}\nq_${c} = ${num(q)}\nk_${c} = ${num(kc)}\n` +
      `q_${c} · k_${c} = ${num(q * kc)}`);
  }

  return {draw};
}
