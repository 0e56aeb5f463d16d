// attnviz's One token view: what one query attends to in every layer and head at once, a row per head and
// a column per key, fitting the window: a long input's keys are max-pooled into columns of pixels (so no
// strong weight disappears) and the tooltip names the keys a column covers. The row comes from the leaf
// tiles of its band; where the page holds no single cells, from each query's strongest keys (headview.js).
// eslint-disable-next-line no-unused-vars
function attnvizOneToken(ctx) {
  "use strict";
  const {K, state, tiles, el, fmt, colour, labelColour, colCut, colGenerated, rowGenerated, G, keysToo, promptEdge,
         lacksCells, showTip, hideTip, valueName, onQuery} = ctx;
  const LINEAR_KEYS = 512;  // keys beyond which the colours are on a log scale (as the matrix's)
  const MANY = 2000;  // queries beyond which a number field chooses one (a list of them would not help)
  const MAX_CELL = 72;  // the widest a key's cell gets (a short text's keys share the view's width)
  const canvas = document.getElementById("queryview"), note = document.getElementById("querynote");
  const scroller = document.getElementById("querybox"), keys = document.getElementById("querykeys");
  let serial = 0;

  function chooser() {
    const k = K(), sel = document.getElementById("querytoken"), at = document.getElementById("queryat");
    const many = k.rows.length > MANY;
    sel.hidden = many; at.hidden = !many;
    if (many) {
      at.max = k.rows.length - 1; at.value = state.query;
      document.getElementById("querytext").textContent = k.rows[state.query] + (rowGenerated(state.query) ? " (generated)" : "");
      return;
    }
    document.getElementById("querytext").textContent = "";
    if (sel.dataset.kind !== state.kind || sel.options.length !== k.rows.length) {
      const name = (t, i) => i + ": " + t + (rowGenerated(i) ? " (generated)" : "");
      sel.replaceChildren(...k.rows.map((t, i) => el("option", {value: i}, name(t, i))));
      sel.dataset.kind = state.kind;
    }
    sel.value = state.query;
  }
  // Query i's row of one head, in the page's units: exact from the leaves, else its strongest keys (sparse).
  async function rowOf(li, h, i) {
    const exact = await tiles.row(state.kind, li, h, i);
    if (exact) return {values: exact, sparse: false};
    const lines = await tiles.lines(state.kind, li, h);
    if (!lines) return null;
    const k = K(), values = new Float32Array(k.cols.length).fill((k.offset || 0) + (k.centre || 0) * (k.scale || 1));
    for (let c = 0; c < lines.k; c++) values[lines.keys[i * lines.k + c]] = Math.max(values[lines.keys[i * lines.k + c]], lines.weights[i * lines.k + c]);
    return {values, sparse: true};
  }

  async function draw() {
    const k = K(), cols = k.cols.length, heads = [], mine = ++serial;
    state.query = Math.max(0, Math.min(state.query, k.rows.length - 1));
    chooser();
    for (let li = 0; li < k.layers.length; li++) for (let h = 0; h < k.heads; h++) heads.push([li, h]);
    const found = await Promise.all(heads.map(([li, h]) => rowOf(li, h, state.query)));
    if (mine !== serial) return;
    note.replaceChildren();
    if (found.some((r) => r === null)) { canvas.width = canvas.height = 0; keys.replaceChildren(); lacksCells(note); return; }
    if (cols > LINEAR_KEYS && !k.panelTitles) note.append(el("p", {class: "hint"}, "Colour: each head's row on a log " +
      "scale, from 4 decades below its strongest weight (dark) to that weight (bright)."));
    if (found.some((r) => r.sparse)) note.append(el("p", {class: "hint"}, `At this length the page holds each query's ` +
      `${k.lines} strongest keys in each head: the other keys are drawn empty (the matrix view shows them pooled).`));
    // Keys per column of cells, and cells' size: every key its own cell while cells of 3 px fit, else pooled.
    // Few keys get wide cells (up to MAX_CELL px), so the view uses the width it has.
    const left = 64, room = Math.max(120, scroller.clientWidth - left - 20);
    const per = cols * 3 <= room ? 1 : Math.ceil(cols / Math.floor(room / 2));
    const shown = Math.ceil(cols / per), cell = per === 1 ? Math.max(3, Math.min(MAX_CELL, Math.floor(room / Math.max(cols, 8)))) : 2;
    const n = heads.length, rowH = Math.max(4, Math.min(20, Math.floor(900 / n))), dpr = window.devicePixelRatio || 1;
    const width = left + shown * cell, height = n * rowH;
    canvas.width = Math.round(width * dpr); canvas.height = Math.round(height * dpr);
    canvas.style.width = width + "px"; canvas.style.height = height + "px";
    const c = canvas.getContext("2d");
    c.setTransform(dpr, 0, 0, dpr, 0, 0); c.clearRect(0, 0, width, height);
    // A column's strongest weight (and where), per head.
    const pooled = found.map(({values}) => {
      const best = new Float32Array(shown), at = new Int32Array(shown);
      for (let x = 0; x < shown; x++) {
        let b = -Infinity, where = x * per;
        for (let j = x * per; j < Math.min(cols, (x + 1) * per); j++) if (values[j] > b) { b = values[j]; where = j; }
        best[x] = b; at[x] = where;
      }
      return {best, at};
    });
    c.font = Math.min(11, rowH) + "px system-ui, sans-serif"; c.textBaseline = "middle"; c.textAlign = "right";
    // A long input's weights are small: each head's row on a log scale, 4 decades below its strongest weight.
    const logScale = cols > LINEAR_KEYS && !k.panelTitles;
    const shade = (v, most) => (logScale ? colour(v > 0 ? Math.max(0, 4 + Math.log10(v / most)) : 0, 4)
      : colour(v, k.vmax || 1, k.offset || 0));
    heads.forEach(([li, h], r) => {
      const most = Math.max(...pooled[r].best) || 1;
      for (let x = 0; x < shown; x++) {
        const [R, G_, B] = shade(pooled[r].best[x], most);
        c.fillStyle = `rgb(${R},${G_},${B})`; c.fillRect(left + x * cell, r * rowH, cell, rowH);
      }
      if (rowH >= 8 || h === 0) { c.fillStyle = "#1d1d1f"; c.fillText(headName(k.layers[li], h), left - 4, r * rowH + rowH / 2); }
    });
    const colEnd = Math.min(cols - 1, colCut());
    if (G()) {  // keys after the step veiled, the prompt's end dashed
      const from = Math.floor((colEnd + 1) / per);
      c.fillStyle = "rgba(255, 255, 255, 0.82)";
      c.fillRect(left + from * cell, 0, (shown - from) * cell, n * rowH);
      const edge = left + (G().promptLength / per) * cell;
      if (keysToo()) promptEdge(c, edge, 0, edge, n * rowH);
    }
    keyLabels(k, left, cell, per, colEnd, width);
    canvas.onmousemove = (event) => {
      const box = canvas.getBoundingClientRect(), x = Math.floor((event.clientX - box.left - left) / cell);
      const r = Math.floor((event.clientY - box.top) / rowH);
      if (r < 0 || x < 0 || r >= n || x >= shown) return hideTip();
      const [li, h] = heads[r], q = `query ${state.query}: ${k.rows[state.query]}`, j = pooled[r].at[x];
      if (per === 1) {
        return showTip(event, `layer ${k.layers[li]}, head ${h}\n${q}\nkey ${j}: ${k.cols[j]}\n${valueName()}: ${fmt(pooled[r].best[x])}`);
      }
      const last = Math.min(cols, (x + 1) * per) - 1;
      showTip(event, `layer ${k.layers[li]}, head ${h}\n${q}\nkeys ${x * per}–${last} (max-pooled)\n` +
        `strongest at key ${j}: ${k.cols[j]}\n${valueName()}: ${fmt(pooled[r].best[x])}`);
    };
    canvas.onmouseleave = hideTip;
    canvas.onclick = (event) => {  // a key's column: the matrix at this query and that key
      const box = canvas.getBoundingClientRect(), x = Math.floor((event.clientX - box.left - left) / cell);
      const r = Math.floor((event.clientY - box.top) / rowH);
      if (r >= 0 && x >= 0 && r < n && x < shown) ctx.openCell(heads[r][0], heads[r][1], state.query, pooled[r].at[x]);
    };
    Object.assign(canvas.dataset, {left, top: 0, cell, rowh: rowH, per, drawn: String(state.query)});
  }
  // The keys' tokens as text above the cells (a band of their own, kept in sight as the rows scroll): across
  // where a cell is wide enough, else turned upright; none where a cell is under 9 px (a long input).
  function keyLabels(k, left, cell, per, colEnd, width) {
    keys.replaceChildren();
    keys.style.width = width + "px";
    if (per !== 1 || cell < 9) { keys.style.height = "0px"; keys.hidden = true; return; }
    keys.hidden = false;
    const across = cell >= 56, font = Math.min(12, cell - 1);
    keys.classList.toggle("across", across);
    keys.style.height = (across ? font + 10 : 100) + "px";
    k.cols.forEach((t, j) => {
      const span = el("span", {class: "tok" + (k.colSpecial[j] ? " special" : "") + (colGenerated(j) ? " generated" : ""),
                               "data-index": j, title: `key ${j}: ${t}`}, t);
      span.style.left = left + j * cell + cell / 2 + "px";
      span.style.fontSize = font + "px";
      if (across) span.style.maxWidth = cell - 2 + "px";
      if (j > colEnd) span.style.opacity = "0.3";
      span.style.color = labelColour(colGenerated(j), k.colSpecial[j], false);
      keys.append(span);
    });
  }
  document.getElementById("queryat").addEventListener("change", (event) => {
    const i = Math.round(+event.target.value);
    if (Number.isFinite(i) && i >= 0 && i < K().rows.length) onQuery(i);
  });
  return {draw};
}
