// attnviz's interactive attention page. Everything it needs is in this file and in the JSON
// of #attnviz-data: no request to any network, ever. Each head is stored quantised, gzipped and
// base64-encoded, and decoded (with the browser's DecompressionStream) only when it is drawn.
(() => {
  "use strict";
  let data = JSON.parse(document.getElementById("attnviz-data").textContent);
  const $ = (sel) => document.querySelector(sel);
  const el = (tag, attrs = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const child of children) node.append(child);
    return node;
  };
  // A page of pictures holds its matrix with each picture's tokens collapsed too, as a kind of its own: the matrix
  // view's (unless the pictures are expanded), never one to choose.
  const collapsedKind = () => (data.pictures ? data.pictures.collapsed.kind : null);
  const kindsShown = () => Object.keys(data.kinds).filter((k) => k !== collapsedKind());
  let kinds = kindsShown();
  const HEAD_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                       "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"];
  const state = {
    kind: data.initial.kind && data.kinds[data.initial.kind] ? data.initial.kind : kinds[0],
    layer: data.initial.layer || 0, head: data.initial.head || 0, view: data.initial.view || "head",
    enabled: null, hoverRow: -1, hoverCol: -1, query: data.initial.query || 0, step: 0,
  };
  const K = () => data.kinds[state.kind];
  state.enabled = new Set([Math.min(state.head, K().heads - 1)]);

  // --- tiles (tiles.js): decoded only when drawn -------------------------------------------------
  const tiles = attnvizTiles(() => data);
  // One head's whole matrix (Float32Array rows * cols, in the page's units), or null where the page
  // holds only pooled levels (a long input: the matrix view zooms into those).
  const matrix = (kind, li, h) => tiles.matrix(kind, li, h);
  function lacksCells(box) {
    const k = K(), factor = k.levels[k.included - 1].factor;
    const note = el("p", {class: "hint lacking"}, `This view draws single tokens; this page holds the matrix down to ` +
      `${factor}×${factor}-token cells (see the notes above). The matrix and model views show it.`);
    box.replaceChildren(note);
  }
  // From offset (0, or −m for signed values) to vmax.
  const colour = (v, vmax, offset = 0) => {
    const t = Math.max(0, Math.min(255, Math.round(((v - offset) / ((vmax - offset) || 1)) * 255)));
    return data.cmap[t];
  };
  // Values to what the page stores: 4 significant digits of half floats, 3 of a byte.
  const fmt = (v) => {
    const digits = K().encoding === "f16" ? 4 : 3;
    if (Math.abs(v) >= 100) return v.toFixed(1);
    if (v === 0 || Math.abs(v) >= 1e-3) return Math.abs(v) >= 1 ? v.toFixed(digits - 1) : Number(v.toPrecision(digits)).toString();
    return v.toExponential(digits - 1);
  };
  const tip = $("#tooltip");
  function showTip(event, text) {
    tip.textContent = text; tip.style.display = "block";
    tip.style.left = event.clientX + 14 + "px"; tip.style.top = event.clientY + 14 + "px";
  }
  const hideTip = () => { tip.style.display = "none"; };
  const layerName = (i) => (K().panelTitles ? "" : "layer " + K().layers[i]);
  const headName = (h) => (K().panelTitles ? K().panelTitles[h] : "head " + h);

  // --- a generated text: the step slider (steps.js), and what it dims ------------------------------
  // At step s (a position), rows after s were not computed yet, nor keys after s on the generated axis.
  let steps = null;
  const GENERATED = "#c2410c";
  const G = () => (data.generation && data.generation.kinds.includes(state.kind) ? data.generation : null);
  const keysToo = () => G() !== null && data.generation.keyKinds.includes(state.kind);
  const rowCut = () => (G() ? state.step : Infinity);
  const colCut = () => (keysToo() ? state.step : Infinity);
  const rowGenerated = (i) => G() !== null && i >= G().promptLength;
  const colGenerated = (j) => keysToo() && j >= G().promptLength;
  const labelColour = (generated, special, marked) =>
    (marked ? "#3b5bdb" : generated ? GENERATED : special ? "#8e8e93" : "#1d1d1f");
  function setStep(position) {  // the views that show a step (or the query) follow it
    state.step = state.query = position;
    if (["head", "matrix", "query", "qk"].includes(state.view)) draw();
  }
  function followQuery(i) {  // a query chosen elsewhere moves the slider where it is a step
    if (steps && G() && steps.contains(i)) { state.step = i; steps.set(i); }
  }
  function stepBar() {
    if (steps) steps.remove();
    steps = null;
    const kind = data.generation && data.generation.kinds.find((name) => data.kinds[name]);
    if (!kind) return;
    steps = attnvizStepSlider(data.generation, data.kinds[kind].rows, setStep);
    state.step = Math.max(steps.first, Math.min(steps.last, state.query));
    steps.set(state.step);
    $("#controls").after(steps.element);
  }
  // A dashed line where the prompt ends (between positions promptLength - 1 and promptLength).
  function promptEdge(ctx, x0, y0, x1, y1) {
    ctx.save(); ctx.strokeStyle = GENERATED; ctx.lineWidth = 1.5; ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke(); ctx.restore();
  }

  // --- controls ---------------------------------------------------------------------------------
  function controls() {
    const box = $("#controls");
    box.replaceChildren();
    if (steps) steps.element.hidden = !G();
    if (kinds.length > 1) {
      const sel = el("select", {id: "kind", onchange: (e) => { state.kind = e.target.value; state.layer = 0; state.head = 0;
        state.enabled = new Set(Array.from({length: K().heads}, (_, h) => h)); controls(); draw(); }});
      for (const k of kinds) sel.append(el("option", {value: k}, k === "self" ? "encoder / self" : k));
      sel.value = state.kind;
      box.append(el("label", {}, "attention "), sel);
    }
    if (K().layers.length > 1) {
      const sel = el("select", {id: "layer", onchange: (e) => { state.layer = +e.target.value; draw(); }});
      K().layers.forEach((l, i) => sel.append(el("option", {value: i}, "layer " + l)));
      sel.value = state.layer;
      box.append(el("label", {}, "layer "), sel);
    }
    const heads = el("div", {class: "swatches", id: "heads"});
    for (let h = 0; h < K().heads; h++) {
      const sw = el("div", {class: "swatch" + (state.enabled.has(h) ? "" : " off"), title: headName(h) +
        " (click: show or hide in the head view; double-click: only this one)", "data-head": h}, String(h));
      sw.style.background = HEAD_COLORS[h % HEAD_COLORS.length];
      sw.style.borderColor = h === state.head ? "#000" : "transparent";
      sw.addEventListener("click", () => {
        if (state.enabled.has(h)) state.enabled.delete(h); else state.enabled.add(h);
        state.head = h; controls(); draw();
      });
      sw.addEventListener("dblclick", () => { state.enabled = new Set([h]); state.head = h; controls(); draw(); });
      heads.append(sw);
    }
    box.append(el("label", {}, K().panelTitles ? "panel " : "heads "), heads);
  }

  // --- head view: tokens in two columns, a line per weight (headview.js) ----------------------------
  const headPanel = attnvizHeadView({
    K, state, tiles, el, fmt, labelColour, rowCut, colCut, rowGenerated, colGenerated, G, keysToo, promptEdge, lacksCells,
    colours: (h) => HEAD_COLORS[h % HEAD_COLORS.length],
    selectQuery: (i) => { state.query = i; followQuery(i); },
    openQuery: (i) => { state.query = i; followQuery(i); setView("query"); },
  });
  const headView = () => headPanel.draw();

  // --- model view: every layer x head as a thumbnail --------------------------------------------
  function paint(canvas, m, rows, cols, size, vmax, offset = 0) {
    // Max-pooled into size x size pixels, so a strong weight never disappears.
    const fy = Math.max(1, Math.ceil(rows / size)), fx = Math.max(1, Math.ceil(cols / size));
    const h = Math.ceil(rows / fy), w = Math.ceil(cols / fx);
    canvas.width = w; canvas.height = h;
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(w, h);
    for (let r = 0; r < h; r++) for (let c = 0; c < w; c++) {
      // Signed values (offset < 0) keep the one of largest magnitude, so strong negatives show too.
      let best = offset < 0 ? 0 : offset;
      for (let i = r * fy; i < Math.min(rows, (r + 1) * fy); i++)
        for (let j = c * fx; j < Math.min(cols, (c + 1) * fx); j++) {
          const v = m[i * cols + j];
          if (offset < 0 ? Math.abs(v) > Math.abs(best) : v > best) best = v;
        }
      const [R, G, B] = colour(best, vmax, offset), o = (r * w + c) * 4;
      img.data[o] = R; img.data[o + 1] = G; img.data[o + 2] = B; img.data[o + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
  }
  let modelSerial = 0;
  async function modelView() {
    const k = K(), grid = $("#modelgrid"), size = 96;
    grid.replaceChildren();
    grid.style.gridTemplateColumns = (k.panelTitles ? "" : "auto ") + `repeat(${Math.min(k.heads, k.panelTitles ? 6 : k.heads)}, ${size}px)`;
    const jobs = [];
    k.layers.forEach((layer, li) => {
      if (!k.panelTitles) grid.append(el("div", {class: "rowlabel"}, "L" + layer));
      for (let h = 0; h < k.heads; h++) {
        const canvas = el("canvas", {width: size, height: size, "data-layer": li, "data-head": h, role: "img",
          "aria-label": (k.panelTitles ? headName(h) : `layer ${layer}, head ${h}`) + ": the whole matrix, max-pooled"});
        canvas.style.width = size + "px"; canvas.style.height = size + "px";
        canvas.style.imageRendering = "pixelated";
        const fig = el("figure", {class: li === state.layer && h === state.head ? "selected" : "",
          title: (k.panelTitles ? headName(h) : `layer ${layer}, head ${h}`) + ": click to open"},
          canvas, el("figcaption", {}, k.panelTitles ? headName(h) : "H" + h));
        fig.addEventListener("click", () => { state.layer = li; state.head = h; setView("matrix"); });
        grid.append(fig);
        jobs.push([canvas, li, h]);
      }
    });
    // Thumbnails in sight first (a large model has hundreds), then the rest a few at a time between frames;
    // a newer drawing of the view stops this one.
    const mine = ++modelSerial, waiting = new Set(jobs), seen = [], byCanvas = new Map(jobs.map((j) => [j[0], j]));
    const observer = new IntersectionObserver((entries) => {
      for (const e of entries) if (e.isIntersecting) seen.push(e.target);
    });
    jobs.forEach(([canvas]) => observer.observe(canvas));
    const paintOne = async ([canvas, li, h]) => {
      const m = await tiles.tile(state.kind, li, h, 0, 0, 0), g = k.levels[0];  // the whole head, max-pooled
      paint(canvas, m, g.rows, g.cols, size, k.vmax * 1 || 1, k.offset || 0);
      canvas.dataset.drawn = "1";
    };
    await new Promise((resolve) => requestAnimationFrame(resolve));  // the observer's first report
    while (waiting.size && mine === modelSerial) {
      const started = performance.now();
      while (waiting.size && performance.now() - started < 12) {
        let next = null;
        while (seen.length && !(next && waiting.has(next))) next = byCanvas.get(seen.shift());
        if (!(next && waiting.has(next))) next = waiting.values().next().value;
        waiting.delete(next);
        await paintOne(next);
      }
      await new Promise((resolve) => requestAnimationFrame(resolve));
    }
    observer.disconnect();
  }

  // --- matrix: one head at any length, zoomable (matrix.js) --------------------------------------
  // On a page of pictures it draws the collapsed kind unless they are expanded (its own state's kind; the rest is
  // the page's state), and a token's position there is its picture's row.
  let expandPictures = false;
  const collapsed = () => (collapsedKind() && !expandPictures && state.kind === "self" && data.kinds[collapsedKind()]
    ? data.pictures.collapsed : null);
  const matrixKind = () => (collapsed() ? collapsedKind() : state.kind);
  const toMatrix = (i) => (collapsed() ? collapsed().index[i] : i);
  const fromMatrix = (i) => (collapsed() ? collapsed().first[i] : i);
  const matrixState = !data.pictures ? state : new Proxy(state, {
    get: (target, name) => (name === "kind" ? matrixKind() : target[name]),
    set: (target, name, value) => { target[name] = value; return true; },
  });
  const matrixPanel = attnvizMatrix({
    data: () => data, state: matrixState, K: !data.pictures ? K : () => data.kinds[matrixKind()], tiles, showTip, hideTip, fmt, rowCut,
    colCut, rowGenerated, colGenerated, G, keysToo, promptEdge,
    selectQuery: (i) => { i = fromMatrix(i); state.query = i; followQuery(i); },
    title: () => { $("#matrixtitle").textContent = [data.model, state.kind === "self" ? "" : state.kind,
      layerName(state.layer), headName(state.head), collapsed() ? "each picture's tokens as one row and column" : ""]
      .filter(Boolean).join(" · "); },
  });
  // The matrix bar's box that expands the pictures (a page of pictures only).
  function expandBox() {
    let label = $("#expandlabel");
    if (!data.pictures) { if (label) label.hidden = true; return; }
    if (!label) {
      const box = el("input", {type: "checkbox", id: "expandimages"});
      box.addEventListener("change", () => { expandPictures = box.checked; if (state.view === "matrix") draw(); });
      label = el("label", {id: "expandlabel", title: "every token of each picture, or each picture as one row and " +
        "column (the sum of a row's weights on its tokens; the mean of its rows)"}, box, " every image token");
      $(".matrixbar").append(label);
      expandPictures = Boolean(data.pictures.expand);
    }
    label.hidden = false;
    $("#expandimages").checked = expandPictures;
  }
  const matrixView = () => matrixPanel.draw();

  // --- heads table --------------------------------------------------------------------------------
  let sortBy = null;
  function tableView() {
    const s = data.stats, box = $("#table");
    if (!s) { box.replaceChildren(el("p", {class: "hint"}, "No head statistics on this page.")); return; }
    const rows = s.rows.slice();
    const index = sortBy === null ? -1 : s.columns.indexOf(sortBy);
    if (index >= 0) rows.sort((a, b) => (index < 2 ? a[index] - b[index] : b[index] - a[index]));
    const head = el("tr");
    s.columns.forEach((c) => head.append(el("th", {class: c === sortBy ? "sorted" : "", title: s.descriptions[c] || c,
      onclick: () => { sortBy = c; tableView(); }}, c)));
    head.append(el("th", {}, "labels"));
    const table = el("table", {class: "heads"}, el("thead", {}, head));
    const body = el("tbody");
    for (const r of rows) {
      const tr = el("tr", {class: r[0] === K().layers[state.layer] && r[1] === state.head ? "selected" : ""});
      r.slice(0, s.columns.length).forEach((v, c) => tr.append(el("td", {}, c < 2 ? String(v) : Number(v).toFixed(3))));
      tr.append(el("td", {class: "labels"}, r[s.columns.length].join(", ")));
      tr.addEventListener("click", () => {
        state.layer = Math.max(0, data.kinds.self.layers.indexOf(r[0])); state.head = r[1]; state.kind = "self";
        controls(); setView("matrix");
      });
      body.append(tr);
    }
    table.append(body);
    box.replaceChildren(table);
  }

  // --- query-key view (bertviz's neuron view), as a picture fitting the window (qk.js) ----------------------
  const qkPanel = attnvizQK({
    data: () => data, K, state, el, fmt, matrix, rowGenerated, colGenerated, showTip, hideTip,
    onQuery: (i) => { state.query = i; followQuery(i); draw(); },
  });
  async function qkView() {
    return qkPanel.draw();
  }

  // --- one token across the model: its row in every layer and head --------------------------------
  const queryPanel = attnvizOneToken({
    K, state, tiles, el, fmt, colour, labelColour, colCut, colGenerated, rowGenerated, G, keysToo, promptEdge, lacksCells,
    showTip, hideTip, valueName: () => data.valueName,
    onQuery: (i) => { state.query = i; followQuery(i); draw(); },
    openCell: (li, h, i, j) => {
      state.layer = li; state.head = h; state.query = i; controls(); setView("matrix");
      matrixPanel.pick("row", toMatrix(i), true);
      return matrixPanel.zoomTo(toMatrix(i), toMatrix(j), 24);
    },
  });
  const queryView = () => queryPanel.draw();

  // --- other matrices (compare-heads' head distances) --------------------------------------------
  function extrasView() {
    const box = $("#extrasbox");
    box.replaceChildren();
    for (const x of data.extras || []) {
      const n = x.rows.length, m = x.cols.length, cell = Math.max(3, Math.min(16, Math.floor(640 / Math.max(n, m))));
      const labels = cell >= 8, left = labels ? 56 : 0, top = labels ? 56 : 0;
      const canvas = el("canvas", {class: "extra"});
      canvas.width = left + m * cell; canvas.height = top + n * cell;
      const ctx = canvas.getContext("2d");
      for (let i = 0; i < n; i++) for (let j = 0; j < m; j++) {
        const [R, G, B] = colour(x.values[i][j], x.vmax || 1);
        ctx.fillStyle = `rgb(${R},${G},${B})`; ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
      }
      if (labels) {
        ctx.fillStyle = "#1d1d1f"; ctx.font = Math.min(11, cell) + "px system-ui, sans-serif"; ctx.textBaseline = "middle";
        ctx.textAlign = "right"; x.rows.forEach((t, i) => ctx.fillText(t, left - 3, top + i * cell + cell / 2));
        x.cols.forEach((t, j) => { ctx.save(); ctx.translate(left + j * cell + cell / 2, top - 3); ctx.rotate(-Math.PI / 2);
          ctx.textAlign = "left"; ctx.fillText(t, 0, 0); ctx.restore(); });
      }
      const at = (event) => {
        const r = canvas.getBoundingClientRect();
        return [Math.floor((event.clientY - r.top - top) / cell), Math.floor((event.clientX - r.left - left) / cell)];
      };
      canvas.addEventListener("mousemove", (event) => {
        const [i, j] = at(event);
        if (i < 0 || j < 0 || i >= n || j >= m) return hideTip();
        showTip(event, `${x.rows[i]} · ${x.cols[j]}\n${x.valueName}: ${x.values[i][j]}`);
      });
      canvas.addEventListener("mouseleave", hideTip);
      canvas.addEventListener("click", (event) => {  // a head's name opens it
        const [i] = at(event), name = /^L(\d+)H(\d+)$/.exec(x.rows[i] || "");
        const li = name ? data.kinds.self.layers.indexOf(+name[1]) : -1;
        if (li >= 0) { state.kind = "self"; state.layer = li; state.head = +name[2]; controls(); setView("matrix"); }
      });
      box.append(el("h2", {class: "hint"}, x.title), canvas, el("p", {class: "hint"}, x.notes.join(" · ")));
    }
  }

  // --- find a token of the context by its text, and go to it ---------------------------------------
  const finder = {matches: [], at: -1};
  function findBox() {
    const form = $("#find");
    if (form.dataset.ready) return;
    form.dataset.ready = "1";
    const input = el("input", {type: "search", id: "findtext", placeholder: "find a token…",
                               "aria-label": "find a token of the text (Enter: next, Shift+Enter: previous)"});
    const prev = el("button", {type: "button", id: "findprev", title: "previous match (Shift+Enter)"}, "↑");
    const next = el("button", {type: "button", id: "findnext", title: "next match (Enter)"}, "↓");
    const count = el("span", {class: "hint", id: "findcount", "aria-live": "polite"});
    form.append(input, prev, next, count);
    const search = () => {
      const wanted = input.value.trim().toLowerCase(), rows = K().rows;
      finder.matches = wanted ? rows.flatMap((t, i) => (t.toLowerCase().includes(wanted) ? [i] : [])) : [];
      finder.at = -1;
      count.textContent = wanted ? `${finder.matches.length} of ${rows.length} tokens` : "";
    };
    const go = (step) => {
      if (!finder.matches.length) return;
      finder.at = (finder.at + step + finder.matches.length) % finder.matches.length;
      const i = finder.matches[finder.at];
      count.textContent = `${finder.at + 1} of ${finder.matches.length}: position ${i}, ${K().rows[i]}`;
      goToToken(i);
    };
    input.addEventListener("input", search);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); go(e.shiftKey ? -1 : 1); } });
    form.addEventListener("submit", (e) => e.preventDefault());
    prev.addEventListener("click", () => go(-1));
    next.addEventListener("click", () => go(1));
  }
  // Query token i chosen (found, or its text clicked): every view follows it.
  function goToToken(i) {
    state.query = i; followQuery(i);
    if (state.view === "head") return headPanel.goTo(i);
    if (["query", "qk"].includes(state.view)) return draw();
    if (state.view !== "matrix") setView("matrix");
    matrixPanel.pick("row", toMatrix(i), true);
    return matrixPanel.zoomTo(toMatrix(i), toMatrix(i), Math.max(16, 1 / (matrixPanel.view.tpp || 1)));
  }

  // --- tabs ---------------------------------------------------------------------------------------
  // The views are records in Python (attnviz/render/page_views.py): their names, tabs and what they need
  // come with the data; each one's drawing function is here, under its name (a view added from outside brings
  // its own in its section's script, window.attnvizViews[name], called with the data, the state and the section).
  // --- the pictures a model read, with a token's attention as heat over them (picture.js) ------------------
  const picturePanel = attnvizPicture({data: () => data, state, K, el, fmt, showTip, hideTip});
  const pictureView = () => picturePanel.draw();

  const DRAW = {picture: pictureView, head: headView, model: modelView, matrix: matrixView, query: queryView, qk: qkView, table: tableView,
                extras: extrasView, ...Object.fromEntries(Object.entries(window.attnvizViews || {}).map(
                  ([name, f]) => [name, () => f(data, state, document.getElementById("view-" + name))]))};
  const VIEWS = Object.fromEntries(data.views.filter((v) => DRAW[v.name]).map((v) => [v.name, [v.tab, DRAW[v.name], v]]));
  function setView(view) {
    state.view = view;
    if (view !== "matrix" && $("#opened")) $("#opened").hidden = true;  // why it opened on the matrix: said once
    document.querySelectorAll("nav.tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
    document.querySelectorAll("main section").forEach((s) => s.classList.toggle("active", s.id === "view-" + view));
    draw();
  }
  function draw() {
    hideTip();
    return VIEWS[state.view][1]();
  }
  // Whether the head and One token views can draw this kind: its single cells, or its queries' strongest keys.
  const drawsTokens = () => K().included >= K().levels.length || K().lines > 0;
  const lacking = () => { const f = K().levels[K().included - 1].factor; return `${f}×${f}`; };
  // The query the One token and query-key views open on: the page's own (a generated text's first step), else the
  // last token that is not a special one ([SEP], </s>): it sees every key on a causal model, where the first sees
  // only itself.
  function defaultQuery() {
    if (Number.isInteger(data.initial.query)) return data.initial.query;
    const special = K().rowSpecial || [];
    for (let i = K().rows.length - 1; i >= 0; i--) if (!special[i]) return i;
    return Math.max(0, K().rows.length - 1);
  }
  function build() {
    document.title = data.title;
    $("#title").textContent = data.title;
    $("#notes").textContent = data.notes.join(" · ");
    const nav = $("#tabs");
    nav.replaceChildren();
    for (const [view, [name, , about]] of Object.entries(VIEWS)) {
      const needed = about.needs && data[about.needs];
      if (about.needs && !(Array.isArray(needed) ? needed.length : needed)) continue;
      if (about.heads && K().panelTitles) continue;
      nav.append(el("button", {"data-view": view, onclick: () => setView(view)}, name));
    }
    if (!nav.querySelector(`[data-view="${state.view}"]`)) state.view = nav.querySelector("button").dataset.view;
    // The head and One token views draw single cells, or each query's strongest keys (a long text's lines); a page
    // that holds neither opens on the matrix and says why, where it is seen.
    const asked = state.view;
    let opened = $("#opened");
    if (!opened) {
      opened = el("p", {class: "opened", id: "opened", role: "status"});
      $("#controls").after(opened);
    }
    if (["head", "query"].includes(state.view) && !drawsTokens()) state.view = "matrix";
    opened.hidden = asked === state.view;
    opened.textContent = opened.hidden ? "" : `Opened on the Matrix tab, not the ${VIEWS[asked][0]} tab: that ` +
      `view draws single tokens or each query's strongest keys, and this page of ${K().rows.length.toLocaleString("en")} ` +
      `tokens holds neither (its matrix goes down to ${lacking()}-token cells). A page of fewer layers (view --layer N) ` +
      `or a shorter text holds them; attnviz serve computes them as you go.`;
    state.query = defaultQuery();
    stepBar();
    controls();
    findBox();
    expandBox();
    setView(state.view);
  }
  // A new text's data (attnviz serve): the same views, the same layer, head and view where they exist.
  function replace(next) {
    data = next; kinds = kindsShown(); tiles.clear(); window.attnviz.data = data;
    if (!data.kinds[state.kind]) state.kind = kinds[0];
    state.layer = Math.min(state.layer, K().layers.length - 1);
    state.head = Math.min(state.head, K().heads - 1);
    state.enabled = new Set([...state.enabled].filter((h) => h < K().heads));
    if (!state.enabled.size) state.enabled.add(state.head);
    state.hoverRow = state.hoverCol = -1; headPanel.reset();  // build() chooses the query
    build();
  }
  // attnviz serve: a text box (and pair/target boxes where they apply), recomputed as the user types.
  function live(options) {
    const box = el("form", {class: "live", onsubmit: (e) => e.preventDefault()});
    const fields = {text: el("textarea", {id: "live-text", rows: 2, placeholder: "Type a text…"})};
    fields.text.value = options.text || "";
    box.append(fields.text);
    for (const name of options.fields || []) {
      fields[name] = el("input", {id: "live-" + name, placeholder: name === "pair" ? "second sentence (optional)" :
        "the decoder's input (target)"});
      fields[name].value = options[name] || "";
      box.append(fields[name]);
    }
    const status = el("span", {class: "hint", id: "live-status"});
    box.append(status);
    document.querySelector("header").after(box);
    let timer = null, serial = 0;
    const update = async () => {
      const params = new URLSearchParams();
      for (const [name, input] of Object.entries(fields)) if (input.value.trim()) params.set(name, input.value);
      if (!params.get("text")) return;
      const mine = ++serial;
      status.textContent = "computing…";
      try {
        const reply = await fetch(options.endpoint, {method: "POST", headers: {"Content-Type": "application/json"},
                                                     body: JSON.stringify(Object.fromEntries(params))});
        const body = await reply.json();
        if (mine !== serial) return;  // a newer request is on its way
        if (!reply.ok) { status.textContent = body.error || reply.statusText; return; }
        status.textContent = "";
        replace(body);
      } catch (err) {
        if (mine === serial) status.textContent = "the server did not answer: " + err;
      }
    };
    for (const input of Object.values(fields)) input.addEventListener("input", () => {
      clearTimeout(timer); timer = setTimeout(update, 250);
    });
  }
  $("#querytoken").addEventListener("change", (e) => { state.query = +e.target.value; followQuery(state.query); draw(); });
  // For tests and scripts: the decoded weight of one cell, and what is shown.
  window.attnviz = {data, state, weight: async (kind, li, h, i, j) => (await matrix(kind, li, h))[i * data.kinds[kind].cols.length + j],
                    setView, replace, select: (li, h) => { state.layer = li; state.head = h; controls(); return draw(); },
                    matrix: matrixPanel, head: headPanel, picture: picturePanel, goToToken};
  if (data.live) live(data.live);
  build();
})();
