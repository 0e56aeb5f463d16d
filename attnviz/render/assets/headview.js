// attnviz's head view: query tokens on the left, key tokens on the right, a line per weight, at any
// length. Only the rows in sight are drawn: the tokens are DOM text (the browser's find, selection and
// screen readers read them), the lines one canvas the size of the window, redrawn as it scrolls. A short
// text's lines come from its whole matrix; a long one's from the strongest keys of each query the page
// holds (attnviz/render/page.py, LINES). Hover a token to see only its lines; click one to keep it.
// eslint-disable-next-line no-unused-vars
function attnvizHeadView(ctx) {
  "use strict";
  const {K, state, tiles, el, fmt, colours, labelColour, rowCut, colCut, rowGenerated, colGenerated, G, keysToo,
         promptEdge, lacksCells, openQuery} = ctx;
  // A line's strength is its weight over the strongest weight drawn (said above the view): a long context's
  // weights are small, and its strongest lines still stand out; below FAINT of the strongest, none is drawn.
  const ROW = 18, PAD = 8, OVERSCAN = 12, FAINT = 0.02;
  const box = document.getElementById("headscroll"), space = document.getElementById("headspace");
  const canvas = document.getElementById("headview"), rowsBox = document.getElementById("headrows");
  const colsBox = document.getElementById("headcols"), top = document.getElementById("headtop");
  let sources = [], serial = 0, frame = 0;
  const pinned = {row: -1, col: -1};

  // --- where the lines come from: a head's whole matrix, or each query's strongest keys --------------------
  // A source answers lines of row i, and of column j, as [i, j, weight] in the page's units.
  function fromMatrix(m, cols) {
    return {
      row: (i, out) => { for (let j = 0; j < cols; j++) out.push([i, j, m[i * cols + j]]); },
      col: (j, rows, out) => { for (let i = 0; i < rows; i++) out.push([i, j, m[i * cols + j]]); },
      all: true,
    };
  }
  function fromLines(lines) {
    const {keys, weights, k} = lines;
    return {
      row: (i, out) => { for (let c = 0; c < k; c++) out.push([i, keys[i * k + c], weights[i * k + c]]); },
      col: (j, rows, out) => { for (let n = 0; n < keys.length; n++) if (keys[n] === j) out.push([Math.floor(n / k), j, weights[n]]); },
      all: false,
    };
  }
  async function load() {
    const k = K(), heads = [...state.enabled].sort((a, b) => a - b), mine = ++serial;
    const found = await Promise.all(heads.map(async (h) => {
      const m = await tiles.matrix(state.kind, state.layer, h);
      if (m) return fromMatrix(m, k.cols.length);
      const lines = await tiles.lines(state.kind, state.layer, h);
      return lines ? fromLines(lines) : null;
    }));
    if (mine !== serial) return false;  // a newer draw is on its way
    sources = found.map((source, n) => source && {...source, head: heads[n]});
    return true;
  }

  // --- geometry --------------------------------------------------------------------------------------------
  const count = () => Math.max(K().rows.length, K().cols.length);
  let longestOf = [null, 0];
  function longest() {  // characters of the longest token, for the width of the token columns
    if (longestOf[0] !== K()) {
      let n = 0;
      for (const t of K().rows) n = Math.max(n, t.length);
      for (const t of K().cols) n = Math.max(n, t.length);
      longestOf = [K(), n];
    }
    return longestOf[1];
  }
  const y = (i) => PAD + i * ROW + ROW / 2;  // in the scrolled space
  function layout() {
    const width = Math.max(320, box.clientWidth), height = Math.min(count() * ROW + 2 * PAD, box.clientHeight || 600);
    const label = Math.round(Math.max(72, Math.min(220, width * 0.18, 7.5 * longest() + 20)));
    // The lines span the window up to a width where they still read as slopes; the whole centred.
    const gap = Math.max(160, Math.min(width - 2 * label, 760)), margin = Math.max(0, (width - 2 * label - gap) / 2);
    return {width, height, label, x0: margin + label, x1: margin + label + gap, scroll: box.scrollTop};
  }
  function focus() {  // the token whose lines alone are shown: hovered, else kept (clicked)
    if (state.hoverRow >= 0 || state.hoverCol >= 0) return {row: state.hoverRow, col: state.hoverCol};
    return {row: pinned.row, col: pinned.col};
  }

  // --- the tokens in sight, as text ---------------------------------------------------------------------
  function tokens(g, first, last, strength) {
    const k = K(), rowEnd = rowCut(), colEnd = colCut(), stepRow = G() ? state.step : -1, f = focus();
    const make = (side, i, text, special, generated, faded) => {
      const marked = side === "q" ? i === f.row || i === stepRow : i === f.col;
      const span = el("span", {class: "htok " + side + (special ? " special" : "") + (generated ? " generated" : "") +
        (marked ? " marked" : ""), "data-i": i, title: `${side === "q" ? "query" : "key"} ${i}: ${text}`}, text);
      span.style.top = PAD + i * ROW + "px"; span.style.maxWidth = g.label - 6 + "px";
      if (side === "q") span.style.right = g.width - g.x0 + 4 + "px"; else span.style.left = g.x1 + 4 + "px";
      if (faded) span.style.opacity = "0.25";
      if (marked) span.style.color = labelColour(generated, special, true);
      const w = strength.get(i);
      if (side === "k" && w !== undefined) span.style.background = `rgba(59, 91, 219, ${Math.min(0.85, w).toFixed(3)})`;
      if (side === "k" && w !== undefined && w > 0.45) span.style.color = "#fff";
      return span;
    };
    const rows = [], cols = [];
    for (let i = first; i <= Math.min(last, k.rows.length - 1); i++)
      rows.push(make("q", i, k.rows[i], k.rowSpecial[i], rowGenerated(i), i > rowEnd));
    for (let j = first; j <= Math.min(last, k.cols.length - 1); j++)
      cols.push(make("k", j, k.cols[j], k.colSpecial[j], colGenerated(j), j > colEnd));
    rowsBox.replaceChildren(...rows); colsBox.replaceChildren(...cols);
  }

  // --- the lines in sight ---------------------------------------------------------------------------------
  function lines(g, first, last) {
    const k = K(), f = focus(), rowEnd = rowCut(), colEnd = colCut(), rowsN = k.rows.length;
    const scale = k.scale || 1, offset = k.offset || 0, out = [];
    for (const source of sources) {
      const found = [];
      if (f.row >= 0) source.row(f.row, found);
      else if (f.col >= 0) source.col(f.col, rowsN, found);
      else {
        // every row whose lines may cross the window: those in sight, and (from a whole matrix) a few screens around
        const reach = source.all ? Math.max(last - first, 64) * 3 : 0;
        for (let i = Math.max(0, first - reach); i <= Math.min(rowsN - 1, last + reach); i++) source.row(i, found);
      }
      for (const [i, j, v] of found) {
        const w = (v - offset) / scale;
        if (w > 0 && i <= rowEnd && j <= colEnd) out.push([i, j, w, source.head]);
      }
    }
    return out.sort((a, b) => a[2] - b[2]);  // the strongest drawn last, on top
  }
  function paint(g, found, strongest) {
    const dpr = window.devicePixelRatio || 1, c = canvas.getContext("2d");
    canvas.width = Math.round(g.width * dpr); canvas.height = Math.round(g.height * dpr);
    canvas.style.width = g.width + "px"; canvas.style.height = g.height + "px";
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.clearRect(0, 0, g.width, g.height);
    const many = state.enabled.size > 1, stepRow = G() && focus().row < 0 ? state.step : -1;
    c.lineCap = "round";
    for (const [i, j, weight, h] of found) {
      const w = weight / strongest;
      if (w < FAINT) continue;
      const faint = stepRow >= 0 && i !== stepRow ? 0.3 : 1;
      c.strokeStyle = colours(h);
      c.globalAlpha = Math.min(1, 0.12 + 0.88 * Math.sqrt(Math.min(1, w))) * (many ? 0.8 : 1) * faint;
      c.lineWidth = 0.6 + 3.4 * w;
      // A token out of sight: the line ends at the window's edge, dashed (the list above names it).
      const a = y(i) - g.scroll, b = y(j) - g.scroll, edge = (v) => Math.max(1, Math.min(g.height - 1, v));
      c.setLineDash(edge(a) !== a || edge(b) !== b ? [5, 4] : []);
      c.beginPath(); c.moveTo(g.x0, edge(a)); c.lineTo(g.x1, edge(b)); c.stroke();
    }
    c.setLineDash([]);
    c.globalAlpha = 1;
    if (G()) {
      const edge = y(G().promptLength) - ROW / 2 - g.scroll;
      promptEdge(c, 0, edge, g.x0, edge);
      if (keysToo()) promptEdge(c, g.x1, edge, g.width, edge);
    }
  }

  // --- the kept token's strongest keys (or queries), as text one click away ------------------------------
  function summary(found, strongest) {
    const k = K(), f = focus();
    if (f.row < 0 && f.col < 0) {
      top.replaceChildren(el("span", {}, `${k.rows.length} queries, ${k.cols.length} keys` +
        (found.length ? ` · the strongest line drawn is a weight of ${fmt(strongest)}` : "") +
        (sources.some((s) => s && !s.all) ? ` · each query's ${k.lines} strongest keys are drawn (this page holds no more)` : "") +
        " · hover a token for its lines, click to keep it, ↑/↓ to move"));
      return;
    }
    const byRow = f.row >= 0, best = found.slice().sort((a, b) => b[2] - a[2]).slice(0, 8);
    const what = byRow ? `query ${f.row} “${k.rows[f.row]}” attends most to` : `key ${f.col} “${k.cols[f.col]}” is attended most by`;
    const chips = best.map(([i, j, w, h]) => {
      const at = byRow ? j : i, text = byRow ? k.cols[j] : k.rows[i];
      return el("button", {type: "button", class: "chip-token", "data-i": at, title: `go to ${byRow ? "key" : "query"} ${at}`,
        onclick: () => scrollTo(at)}, el("i", {style: `background:${colours(h)}`}), `${at} ${text} `, el("b", {}, fmt(w)));
    });
    const every = el("button", {type: "button", id: "headquery", onclick: () => openQuery(f.row)}, "in every layer and head →");
    top.replaceChildren(...(byRow ? [every] : []), el("span", {}, what + ": "), ...chips);
  }

  // --- drawing, as the window scrolls -----------------------------------------------------------------------
  function render() {
    frame = 0;
    if (loading) return;
    const k = K(), g = layout(), first = Math.max(0, Math.floor((g.scroll - PAD) / ROW) - OVERSCAN);
    const last = Math.min(count() - 1, Math.ceil((g.scroll + g.height - PAD) / ROW) + OVERSCAN);
    const found = lines(g, first, last), f = focus(), strength = new Map();
    const strongest = found.length ? found[found.length - 1][2] : 1;
    if (f.row >= 0) for (const [, j, w] of found) strength.set(j, Math.max(strength.get(j) || 0, w / strongest));
    tokens(g, first, last, strength);
    paint(g, found, strongest);
    summary(found, strongest);
    Object.assign(canvas.dataset, {x0: g.x0, x1: g.x1, rowh: ROW, pad: PAD, scroll: g.scroll, first, last,
                                   lines: found.length, drawn: String(sources.length)});
    if (!k.rows.length) canvas.dataset.drawn = "0";
  }
  const later = () => { if (!frame) frame = requestAnimationFrame(render); };
  let loading = false;
  async function draw() {
    space.style.height = count() * ROW + 2 * PAD + "px";
    loading = true; delete canvas.dataset.drawn;  // until this layer's heads are in (a token kept meanwhile waits)
    if (!(await load())) return;
    loading = false;
    document.getElementById("headnote").replaceChildren();
    if (sources.some((s) => s === null)) {
      canvas.width = canvas.height = 0; rowsBox.replaceChildren(); colsBox.replaceChildren(); top.replaceChildren();
      lacksCells(document.getElementById("headnote"));
      return;
    }
    render();
  }
  function scrollTo(i) {
    box.scrollTop = Math.max(0, PAD + i * ROW - box.clientHeight / 3);
    render();
  }
  // Keep (or let go of) a token: its lines alone, its strongest keys listed above.
  function pick(side, i) {
    state.hoverRow = state.hoverCol = -1;
    if (side === "row") { pinned.row = pinned.row === i ? -1 : i; pinned.col = -1; } else { pinned.col = pinned.col === i ? -1 : i; pinned.row = -1; }
    if (pinned.row >= 0) ctx.selectQuery(pinned.row);
    render();
  }
  box.addEventListener("scroll", later);
  window.addEventListener("resize", () => { if (state.view === "head") later(); });
  const spanOf = (event) => event.target.closest && event.target.closest(".htok");
  space.addEventListener("mouseover", (event) => {
    const span = spanOf(event);
    const row = span && span.classList.contains("q") ? +span.dataset.i : -1, col = span && span.classList.contains("k") ? +span.dataset.i : -1;
    if (row !== state.hoverRow || col !== state.hoverCol) { state.hoverRow = row; state.hoverCol = col; later(); }
  });
  box.addEventListener("mouseleave", () => { state.hoverRow = state.hoverCol = -1; later(); });
  space.addEventListener("click", (event) => {
    const span = spanOf(event);
    if (span) pick(span.classList.contains("q") ? "row" : "col", +span.dataset.i);
  });
  box.addEventListener("keydown", (event) => {
    const n = K().rows.length;
    if (event.key === "Escape") { pinned.row = pinned.col = -1; render(); return; }
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    event.preventDefault();
    const at = Math.max(0, Math.min(n - 1, (pinned.row < 0 ? -1 : pinned.row) + (event.key === "ArrowDown" ? 1 : -1)));
    pinned.row = at; pinned.col = -1; ctx.selectQuery(at);
    if (y(at) < box.scrollTop + ROW || y(at) > box.scrollTop + box.clientHeight - ROW) scrollTo(at); else render();
  });
  return {
    draw, pick, scrollTo,
    // A query chosen elsewhere (found by its text): kept, and in sight.
    goTo: (i) => { state.hoverRow = state.hoverCol = -1; pinned.row = i; pinned.col = -1; scrollTo(i); },
    reset: () => { pinned.row = pinned.col = -1; },
    pinned,
  };
}
