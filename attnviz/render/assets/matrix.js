// attnviz's matrix view: one head at any length, from the whole context down to single cells.
// It opens on the whole matrix, max-pooled so that no strong weight disappears (and says so), and
// draws only the tiles in sight (tiles.js), at the level where a cell is about a pixel or more.
// Scroll to zoom, drag to move, shift-drag a box, double-click to zoom in; keys + − 0 and arrows.
// Token labels (text, not pixels: the browser's find reads them) appear once a token is 10 px wide.
// page.js calls it with what it shares (env) and draws through the returned draw().
// eslint-disable-next-line no-unused-vars
function attnvizMatrix(env) {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const canvas = $("matrix"), wrap = $("matrixwrap"), rowBox = $("matrixrows"), colBox = $("matrixcols");
  const mini = $("minimap"), legend = $("legend"), legendText = $("legendtext"), info = $("matrixinfo");
  const LEFT = 130, TOP = 100, MOST_PX = 40, LABEL_PX = 10, DECADES = 4;
  const view = {x0: 0, y0: 0, tpp: 0, dims: ""};  // the first key and query shown, tokens per pixel
  const options = {scale: "linear", sinks: false};
  const picked = {row: -1, col: -1};
  let W = 600, H = 600, serial = 0, pending = false, shown = null, pointer = null;

  const head = () => env.K().pyramids[env.state.layer][env.state.head];
  const signed = () => (env.K().offset || 0) < 0;
  function size() {
    W = Math.max(240, Math.floor((wrap.clientWidth || 900) - LEFT - 150));  // the minimap on the right
    H = Math.max(240, Math.min(W, Math.floor(window.innerHeight - 300)));
  }
  function fitTpp() {
    const k = env.K();
    return Math.max(k.cols.length / W, k.rows.length / H, 1 / MOST_PX);
  }
  function fit() { view.tpp = fitTpp(); view.x0 = 0; view.y0 = 0; }
  function clamp() {
    const k = env.K();
    view.tpp = Math.min(fitTpp(), Math.max(1 / MOST_PX, view.tpp));
    view.x0 = Math.max(0, Math.min(view.x0, k.cols.length - W * view.tpp));
    view.y0 = Math.max(0, Math.min(view.y0, k.rows.length - H * view.tpp));
  }
  // The level where a cell covers at least one pixel, or the finest this page holds.
  function levels() {
    const k = env.K(), leaf = k.levels.length - 1;
    const wanted = Math.max(0, leaf - Math.ceil(Math.log2(Math.max(1, view.tpp)) - 1e-9));
    return [Math.min(wanted, env.tiles.levelsOf(env.state.kind, env.state.layer, env.state.head) - 1), wanted];
  }
  const X = (j) => LEFT + (j - view.x0) / view.tpp, Y = (i) => TOP + (i - view.y0) / view.tpp;

  // --- the colour scale: linear, log, per row, or by rank among the cells shown ---------------------
  function topValue() {
    const k = env.K();
    if (k.panelTitles || signed()) return k.vmax || 1;
    const h = head();
    return (k.offset || 0) + (options.sinks ? h.vmaxNoSinks : h.vmax) * (k.scale || 1) || 1;
  }
  function scaler(tiles, factor, rowMax) {
    const k = env.K(), top = topValue(), offset = k.offset || 0;
    if (signed() || options.scale === "linear") return (v) => (v - Math.min(0, offset)) / ((top - Math.min(0, offset)) || 1);
    if (options.scale === "log") {
      const low = Math.log10(top) - DECADES;
      return (v) => (v > 0 ? (Math.log10(v) - low) / DECADES : 0);
    }
    if (options.scale === "row") {
      return (v, row) => {
        let most = 0;
        for (let i = row * factor; i < Math.min(rowMax.length, (row + 1) * factor); i++) most = Math.max(most, rowMax[i]);
        return most > 0 ? v / most : 0;
      };
    }
    let count = 0;  // rank: where a value falls among (a sample of) the values shown
    for (const t of tiles) count += t.values.length;
    const stride = Math.max(1, Math.floor(count / 200000)), sample = new Float32Array(Math.ceil(count / stride) + tiles.length);
    let n = 0;
    for (const t of tiles) for (let i = 0; i < t.values.length; i += stride) sample[n++] = t.values[i];
    const sorted = sample.subarray(0, n).sort();
    return (v) => {
      let lo = 0, hi = n;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (sorted[mid] <= v) lo = mid + 1; else hi = mid; }
      return n ? lo / n : 0;
    };
  }
  const index = (t) => Math.max(0, Math.min(255, Math.round(t * 255)));
  const MASKED = [243, 243, 245];  // what causal attention never computes: no colour of the scale
  function paintTile(t, toT, factor) {
    const out = document.createElement("canvas");
    out.width = t.cols; out.height = t.rows;
    const ctx = out.getContext("2d"), img = ctx.createImageData(t.cols, t.rows), cmap = env.data().cmap;
    const causal = env.K().causal, T = env.K().tile;
    for (let r = 0; r < t.rows; r++) {
      const row = t.y * T + r, lastQuery = (row + 1) * factor - 1;
      for (let c = 0; c < t.cols; c++) {
        const masked = causal && (t.x * T + c) * factor > lastQuery;  // every key of the cell after every query
        const [R, G, B] = masked ? MASKED : cmap[index(toT(t.values[r * t.cols + c], row, factor))], o = (r * t.cols + c) * 4;
        img.data[o] = R; img.data[o + 1] = G; img.data[o + 2] = B; img.data[o + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    return out;
  }

  // --- drawing ----------------------------------------------------------------------------------
  async function draw() {
    const k = env.K(), s = env.state, mine = ++serial;
    size();
    const dims = `${s.kind}/${k.rows.length}x${k.cols.length}`;
    if (view.dims !== dims || !view.tpp) {
      fit(); view.dims = dims;
      // Over a long context weights span many decades: a linear scale from the largest shows one flat colour.
      options.scale = Math.max(k.rows.length, k.cols.length) > 512 && !signed() ? "log" : "linear";
      $("scale").value = options.scale;
    }
    clamp();
    const [level, wanted] = levels(), g = k.levels[level], f = g.factor, T = k.tile;
    const c0 = Math.floor(view.x0 / f), c1 = Math.min(g.cols, Math.ceil((view.x0 + W * view.tpp) / f));
    const r0 = Math.floor(view.y0 / f), r1 = Math.min(g.rows, Math.ceil((view.y0 + H * view.tpp) / f));
    const wantedTiles = [];
    for (let y = Math.floor(r0 / T); y <= Math.floor((r1 - 1) / T); y++)
      for (let x = Math.floor(c0 / T); x <= Math.floor((c1 - 1) / T); x++) wantedTiles.push([x, y]);
    const values = await Promise.all(wantedTiles.map(([x, y]) => env.tiles.tile(s.kind, s.layer, s.head, level, x, y)));
    const rowMax = options.scale === "row" && !signed() ? await env.tiles.rowMax(s.kind, s.layer, s.head) : null;
    if (mine !== serial) return;  // a newer draw is on its way
    const tiles = wantedTiles.map(([x, y], i) => {
      const [rows, cols] = env.tiles.tileShape(k, level, x, y);
      return {x, y, rows, cols, values: values[i]};
    });
    const toT = scaler(tiles, f, rowMax);
    const dpr = window.devicePixelRatio || 1, width = LEFT + W, height = TOP + H;
    canvas.width = width * dpr; canvas.height = height * dpr;
    canvas.style.width = width + "px"; canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.save();
    ctx.beginPath(); ctx.rect(LEFT, TOP, W, H); ctx.clip();
    ctx.imageSmoothingEnabled = false;
    if (k.causal) { ctx.fillStyle = `rgb(${MASKED})`; ctx.fillRect(X(0), Y(0), X(k.cols.length) - X(0), Y(k.rows.length) - Y(0)); }
    for (const t of tiles) {
      if (k.causal && t.values.absent) continue;  // a tile of masked cells
      const left = X(t.x * T * f), top = Y(t.y * T * f);
      ctx.drawImage(paintTile(t, toT, f), left, top, (t.cols * f) / view.tpp, (t.rows * f) / view.tpp);
    }
    overlays(ctx, k);
    ctx.restore();
    ctx.strokeStyle = "#d2d2d7"; ctx.lineWidth = 1;
    ctx.strokeRect(LEFT - 0.5, TOP - 0.5, Math.min(W, k.cols.length / view.tpp) + 1, Math.min(H, k.rows.length / view.tpp) + 1);
    shown = {level, wanted, factor: f, tiles, toT};
    labels(k);
    minimap(k);
    legendBar(k);
    const pooled = f > 1 ? `one cell = ${f}×${f} tokens, max-pooled (a cell shows the strongest value it covers)`
      : "one cell = one query × one key" + (g.encoding === "lin8" && !env.data().tiles && !signed()
        ? ` (this page stores single cells to 1/255: a weight below ${env.fmt(1 / 510)} reads as 0)` : "");
    const failed = tiles.find((t) => t.values.failed);
    const lacking = failed ? ` · the server did not send a tile: ${failed.values.failed}`
      : level < wanted ? " · finer cells are not in this page (see the notes above)" : "";
    const last = (a, n) => Math.min(n, Math.ceil(a)) - 1;
    info.textContent = `${pooled}${lacking} · queries ${Math.floor(view.y0)}–${last(view.y0 + H * view.tpp, k.rows.length)}` +
      ` × keys ${Math.floor(view.x0)}–${last(view.x0 + W * view.tpp, k.cols.length)} of ${k.rows.length} × ${k.cols.length}`;
    env.title();
    if (pointer && env.state.view === "matrix" && !drag) hover(pointer);
    Object.assign(canvas.dataset, {level, factor: f, x0: view.x0, y0: view.y0, tpp: view.tpp, cell: 1 / view.tpp, left: LEFT, top: TOP,
                                   w: W, h: H, drawn: String(mine)});
  }
  function overlays(ctx, k) {
    ctx.strokeStyle = "#fff"; ctx.lineWidth = 1.5;
    for (const b of k.breaks || []) {
      ctx.beginPath(); ctx.moveTo(X(0), Y(b)); ctx.lineTo(X(k.cols.length), Y(b)); ctx.stroke();
      ctx.beginPath(); ctx.moveTo(X(b), Y(0)); ctx.lineTo(X(b), Y(k.rows.length)); ctx.stroke();
    }
    const rows = k.rows.length, cols = k.cols.length;
    const rowEnd = Math.min(rows - 1, env.rowCut()), colEnd = Math.min(cols - 1, env.colCut()), G = env.G();
    if (G) {  // at a step: what comes after it veiled, that step's row outlined, the prompt's end dashed
      ctx.fillStyle = "rgba(255, 255, 255, 0.82)";
      ctx.fillRect(X(0), Y(rowEnd + 1), X(cols) - X(0), Y(rows) - Y(rowEnd + 1));
      ctx.fillRect(X(colEnd + 1), Y(0), X(cols) - X(colEnd + 1), Y(rowEnd + 1) - Y(0));
      env.promptEdge(ctx, X(0), Y(G.promptLength), X(cols), Y(G.promptLength));
      if (env.keysToo()) env.promptEdge(ctx, X(G.promptLength), Y(0), X(G.promptLength), Y(rows));
      ctx.strokeStyle = "#3b5bdb"; ctx.lineWidth = 2;
      ctx.strokeRect(X(0) + 1, Y(env.state.step) + 1, X(colEnd + 1) - X(0) - 2, Math.max(2, Y(env.state.step + 1) - Y(env.state.step) - 2));
    }
    ctx.strokeStyle = "#e8590c"; ctx.lineWidth = 2;
    if (picked.row >= 0) ctx.strokeRect(X(0), Y(picked.row), X(cols) - X(0), Math.max(2, 1 / view.tpp));
    if (picked.col >= 0) ctx.strokeRect(X(picked.col), Y(0), Math.max(2, 1 / view.tpp), Y(rows) - Y(0));
  }

  // --- tokens as text: a label per cell once cells are large enough (a cell of f×f tokens names its range),
  // else where the ranges begin -------------------------------------------------------------------------
  function labels(k) {
    const f = shown ? shown.factor : 1, px = f / view.tpp, end = (a, n) => Math.min(n, Math.ceil(a));
    const rows = [], cols = [];
    const cells = (from, to, n, names, at) => {  // the cells whose middle is in sight: [first token, text, where, last]
      const out = [];
      for (let c = Math.max(0, Math.floor(from / f)); c * f < Math.min(to, n); c++) {
        const first = c * f, last = Math.min(n, first + f) - 1, middle = (first + last + 1) / 2;
        if (middle < from || middle > Math.min(to, n)) continue;
        const text = f === 1 ? names[first] : `${first}–${last} ${names.slice(first, last + 1).join(" ")}`;
        out.push([first, text, at(middle), last]);
      }
      return out;
    };
    if (px >= LABEL_PX) {
      rows.push(...cells(view.y0, view.y0 + H * view.tpp, k.rows.length, k.rows, Y));
      cols.push(...cells(view.x0, view.x0 + W * view.tpp, k.cols.length, k.cols, X));
    } else {  // a tick about every 60 px: the token that starts there, with its position
      const step = 2 ** Math.ceil(Math.log2(60 * view.tpp));
      for (let i = Math.ceil(view.y0 / step) * step; i < end(view.y0 + H * view.tpp, k.rows.length); i += step)
        rows.push([i, `${i} ▸ ${k.rows[i]}`, Y(i) + 6]);
      for (let j = Math.ceil(view.x0 / step) * step; j < end(view.x0 + W * view.tpp, k.cols.length); j += step)
        cols.push([j, `${j} ▸ ${k.cols[j]}`, X(j) + 6]);
    }
    const font = Math.max(9, Math.min(12, Math.floor(px) - 1));
    const span = (axis, [i, text, at, last = i]) => {
      const generated = axis === "row" ? env.rowGenerated(i) : env.colGenerated(i);
      const special = axis === "row" ? k.rowSpecial[i] : k.colSpecial[i];
      const node = document.createElement("span");
      const mark = axis === "row" ? picked.row : picked.col, names = k[axis === "row" ? "rows" : "cols"];
      node.className = "tok" + (special ? " special" : "") + (generated ? " generated" : "") +
        (mark >= i && mark <= last ? " picked" : "");
      node.textContent = text; node.dataset.index = i; node.dataset.axis = axis;
      if (last > i) node.dataset.last = last;
      node.title = last > i ? `${axis === "row" ? "queries" : "keys"} ${i}–${last}, one cell: ${names.slice(i, last + 1).join(" ")} (click to pick ${i})`
        : `${axis === "row" ? "query" : "key"} ${i}: ${names[i]} (click to pick it)`;
      node.style.fontSize = font + "px";
      if (axis === "row") node.style.top = at + "px"; else node.style.left = at + "px";
      return node;
    };
    rowBox.replaceChildren(...rows.map((r) => span("row", r)));
    colBox.replaceChildren(...cols.map((c) => span("col", c)));
    rowBox.style.height = TOP + H + "px"; colBox.style.width = LEFT + W + "px";
  }
  // A token's text clicked picks its row (its query) or column (its key); clicked again, unpicks it.
  function pick(axis, i, only = false) {
    if (axis === "row") { picked.row = picked.row === i && !only ? -1 : i; if (picked.row >= 0) env.selectQuery(i); }
    else picked.col = picked.col === i && !only ? -1 : i;
    schedule();
  }
  for (const box of [rowBox, colBox]) box.addEventListener("click", (event) => {
    const node = event.target.closest(".tok");
    if (node && !window.getSelection().toString()) pick(node.dataset.axis, +node.dataset.index);
  });

  // --- the whole matrix in small, with where the view is ------------------------------------------
  async function minimap(k) {
    const first = await env.tiles.tile(env.state.kind, env.state.layer, env.state.head, 0, 0, 0);
    const g = k.levels[0], side = 132, cell = side / Math.max(g.rows, g.cols);
    const dpr = window.devicePixelRatio || 1;
    mini.width = side * dpr; mini.height = side * dpr;
    mini.style.width = side + "px"; mini.style.height = side + "px";
    const ctx = mini.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, side, side);
    ctx.imageSmoothingEnabled = false;
    const t = {x: 0, y: 0, rows: g.rows, cols: g.cols, values: first};
    const top = topValue(), toT = signed() ? shown.toT : (v) => (options.scale === "log" ?
      (v > 0 ? (Math.log10(v) - Math.log10(top) + DECADES) / DECADES : 0) : v / top);
    ctx.drawImage(paintTile(t, toT, g.factor), 0, 0, g.cols * cell, g.rows * cell);
    const scale = cell / g.factor;
    ctx.strokeStyle = "#e03131"; ctx.lineWidth = 2;
    ctx.strokeRect(view.x0 * scale, view.y0 * scale, Math.max(3, W * view.tpp * scale), Math.max(3, H * view.tpp * scale));
    mini.dataset.drawn = "1";
    mini.hidden = W * view.tpp >= k.cols.length && H * view.tpp >= k.rows.length;  // the whole matrix is in sight
  }
  mini.addEventListener("click", (event) => {
    const k = env.K(), rect = mini.getBoundingClientRect(), g = k.levels[0];
    const per = g.factor * Math.max(g.rows, g.cols) / rect.width;  // tokens per minimap pixel
    view.x0 = (event.clientX - rect.left) * per - (W * view.tpp) / 2;
    view.y0 = (event.clientY - rect.top) * per - (H * view.tpp) / 2;
    schedule();
  });
  function legendBar(k) {
    const ctx = legend.getContext("2d"), cmap = env.data().cmap;
    legend.width = 256; legend.height = 12;
    for (let i = 0; i < 256; i++) { const [R, G, B] = cmap[i]; ctx.fillStyle = `rgb(${R},${G},${B})`; ctx.fillRect(i, 0, 1, 12); }
    const top = topValue(), name = env.data().valueName;
    const text = signed() || options.scale === "linear" ? [env.fmt(Math.min(0, k.offset || 0)), env.fmt(top), name]
      : options.scale === "log" ? [env.fmt(top / 10 ** DECADES) + " or less", env.fmt(top), name + ", log scale"]
      : options.scale === "row" ? ["0", "its row's largest", name + " ÷ its row's largest"]
      : ["lowest", "highest", "rank among the cells shown"];
    legendText.replaceChildren(...text.map((t) => { const s = document.createElement("span"); s.textContent = t; return s; }));
    const excluded = options.sinks && head().sinks && head().sinks.length ? ` (scale without sinks at keys ${head().sinks.slice(0, 5).join(", ")})` : "";
    legendText.lastChild.textContent += excluded;
  }

  // --- zoom and move ------------------------------------------------------------------------------
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  }
  function zoom(by, px = LEFT + W / 2, py = TOP + H / 2) {
    const ax = view.x0 + (px - LEFT) * view.tpp, ay = view.y0 + (py - TOP) * view.tpp;
    view.tpp = Math.min(fitTpp(), Math.max(1 / MOST_PX, view.tpp * by));
    view.x0 = ax - (px - LEFT) * view.tpp; view.y0 = ay - (py - TOP) * view.tpp;
    schedule();
  }
  // + and − (keys, buttons): about the middle of the matrix in sight (a matrix narrower than the view is not in
  // its middle); on causal attention never into the masked triangle above the diagonal, but onto the diagonal.
  function zoomMiddle(by) {
    const k = env.K();
    let ax = view.x0 + Math.min(W * view.tpp, k.cols.length - view.x0) / 2;
    let ay = view.y0 + Math.min(H * view.tpp, k.rows.length - view.y0) / 2;
    if (k.causal && k.rows.length === k.cols.length && ax > ay) ax = ay = (ax + ay) / 2;
    view.tpp = Math.min(fitTpp(), Math.max(1 / MOST_PX, view.tpp * by));
    view.x0 = ax - (W * view.tpp) / 2; view.y0 = ay - (H * view.tpp) / 2;
    schedule();
  }
  const local = (event) => { const r = canvas.getBoundingClientRect(); return [event.clientX - r.left, event.clientY - r.top]; };
  canvas.addEventListener("wheel", (event) => {
    event.preventDefault();
    pointer = {clientX: event.clientX, clientY: event.clientY};
    const [px, py] = local(event);
    zoom(Math.exp(Math.max(-1, Math.min(1, event.deltaY * 0.002))), px, py);
  }, {passive: false});
  let drag = null;
  canvas.addEventListener("mousedown", (event) => {
    const [px, py] = local(event);
    if (px < LEFT || py < TOP) return;
    env.hideTip();
    drag = {px, py, x0: view.x0, y0: view.y0, box: event.shiftKey, moved: false};
    event.preventDefault();
  });
  window.addEventListener("mousemove", (event) => {
    if (!drag) return;
    const [px, py] = local(event);
    drag.moved = drag.moved || Math.abs(px - drag.px) + Math.abs(py - drag.py) > 3;
    if (drag.box) {
      const box = $("zoombox");
      Object.assign(box.style, {display: "block", left: Math.min(px, drag.px) + "px", top: Math.min(py, drag.py) + "px",
                                width: Math.abs(px - drag.px) + "px", height: Math.abs(py - drag.py) + "px"});
    } else {
      view.x0 = drag.x0 - (px - drag.px) * view.tpp; view.y0 = drag.y0 - (py - drag.py) * view.tpp;
      schedule();
    }
  });
  window.addEventListener("mouseup", (event) => {
    if (!drag) return;
    const [px, py] = local(event), d = drag;
    drag = null;
    $("zoombox").style.display = "none";
    if (d.box && d.moved) {
      const x = view.x0 + (Math.min(px, d.px) - LEFT) * view.tpp, y = view.y0 + (Math.min(py, d.py) - TOP) * view.tpp;
      view.tpp = Math.max(Math.abs(px - d.px) / W, Math.abs(py - d.py) / H) * view.tpp;
      view.x0 = x; view.y0 = y;
      schedule();
    }
  });
  canvas.addEventListener("dblclick", (event) => { const [px, py] = local(event); zoom(event.shiftKey ? 2 : 0.5, px, py); });
  canvas.addEventListener("keydown", (event) => {
    const move = (dx, dy) => { view.x0 += dx * W * view.tpp / 4; view.y0 += dy * H * view.tpp / 4; schedule(); };
    const keys = {"+": () => zoomMiddle(0.5), "=": () => zoomMiddle(0.5), "-": () => zoomMiddle(2), "0": () => { fit(); schedule(); },
      ArrowLeft: () => move(-1, 0), ArrowRight: () => move(1, 0), ArrowUp: () => move(0, -1), ArrowDown: () => move(0, 1)};
    if (keys[event.key]) { keys[event.key](); event.preventDefault(); }
  });
  $("zoomin").addEventListener("click", () => zoomMiddle(0.5));
  $("zoomout").addEventListener("click", () => zoomMiddle(2));
  $("zoomfit").addEventListener("click", () => { fit(); schedule(); });
  $("scale").addEventListener("change", (event) => { options.scale = event.target.value; schedule(); });
  $("nosinks").addEventListener("change", (event) => { options.sinks = event.target.checked; schedule(); });
  window.addEventListener("resize", () => { if (env.state.view === "matrix") schedule(); });

  // --- what the pointer is on ---------------------------------------------------------------------
  // The tooltip is the cell under the pointer's: on a move, and again after each drawing (a wheel zoom moves the
  // cells under a pointer that stays), so it never shows a cell that is no longer there.
  canvas.addEventListener("mousemove", (event) => {
    pointer = {clientX: event.clientX, clientY: event.clientY};
    if (!drag) hover(pointer);
  });
  function hover(event) {
    if (!shown) return env.hideTip();
    const k = env.K(), [px, py] = local(event);
    const i = Math.floor(view.y0 + (py - TOP) * view.tpp), j = Math.floor(view.x0 + (px - LEFT) * view.tpp);
    if (px < LEFT || py < TOP || i >= k.rows.length || j >= k.cols.length) return env.hideTip();
    const {factor, tiles} = shown, r = Math.floor(i / factor), c = Math.floor(j / factor), T = k.tile;
    const t = tiles.find((x) => x.x === Math.floor(c / T) && x.y === Math.floor(r / T));
    if (!t) return env.hideTip();
    const value = t.values[(r - t.y * T) * t.cols + (c - t.x * T)];
    const later = i > env.rowCut() || j > env.colCut() ? "\n(after this step: not generated yet)" : "";
    if (factor === 1) {
      // A page stores a long text's single cells as a byte (to 1/255): a small weight reads as below that.
      const stored = k.levels[shown.level].encoding === "lin8" && !env.data().tiles && value < (k.scale || 1) / 510 && !signed()
        ? `below ${env.fmt(1 / 510)} (this page keeps single cells to 1/255; the server has them exactly)` : env.fmt(value);
      env.showTip(event, `query ${i}: ${k.rows[i]}\nkey ${j}: ${k.cols[j]}\n${env.data().valueName}: ${stored}${later}`);
    } else {
      const rows = [r * factor, Math.min(k.rows.length, (r + 1) * factor) - 1], cols = [c * factor, Math.min(k.cols.length, (c + 1) * factor) - 1];
      const finer = env.tiles.levelsOf(env.state.kind, env.state.layer, env.state.head) === k.levels.length
        ? "zoom in for single cells" : `this page holds no finer cells than ${factor}×${factor}`;
      env.showTip(event, `queries ${rows[0]}–${rows[1]} (${k.rows[rows[0]]} …) × keys ${cols[0]}–${cols[1]} (${k.cols[cols[0]]} …)\n` +
        `strongest ${env.data().valueName}: ${env.fmt(value)} (max-pooled; ${finer})${later}`);
    }
  }
  canvas.addEventListener("mouseleave", () => { pointer = null; env.hideTip(); });

  // Centre the view on query i and key j, with px pixels a token (for links, search and tests).
  function zoomTo(i, j, px = 24) {
    const k = env.K();
    size();
    view.dims = `${env.state.kind}/${k.rows.length}x${k.cols.length}`;
    view.tpp = 1 / px;
    view.x0 = j + 0.5 - (W * view.tpp) / 2; view.y0 = i + 0.5 - (H * view.tpp) / 2;
    return draw();
  }
  return {draw, zoomTo, view, options, pick, picked, fit: () => { fit(); return draw(); }};
}
