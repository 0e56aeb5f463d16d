// attnviz's picture view: each picture the model read (embedded in the page's data as a data: URL), with a token's
// attention as heat over its patches, and which tokens attend to a patch. The weights are the page's
// data.pictures (attnviz/views/picture_page.py): per layer, each head's and the heads' mean weights of the tokens
// listed (queries) on every picture's patches, one [queries, patches] tile each (half floats or a log byte,
// gzipped, base64), decoded when drawn. Hover, focus or click a token: its weights over each picture. Click a
// patch (or focus a picture, move with the arrows, Enter): the tokens' weights on it, on the token list.
// eslint-disable-next-line no-unused-vars
function attnvizPicture(env) {
  "use strict";
  const {el, state, fmt, showTip, hideTip} = env;
  const decode = (text, encoding) => attnvizDecode(text, encoding);  // tiles.js: one decoder for the page

  const MIN_SIDE = 384;  // a small picture is shown larger, its short side at least this (its pixels stay crisp)
  const MAX_SIDE = 900;  // and never wider or taller than this
  const cache = new Map();
  let built = null;  // the data the elements were built for
  let serial = 0;
  const pick = {query: -1, preview: -1, patch: null, cursor: null, mean: false};  // patch, cursor: [picture, cell]
  const P = () => env.data().pictures;
  const keyCount = () => P().images.reduce((n, p) => n + p.positions.length, 0);
  const meanOnly = () => P().weights === null;
  const useMean = () => pick.mean || meanOnly();
  function weights() {  // Float32Array [queries × patches] of the chosen layer and head (or mean)
    const p = P(), li = Math.min(state.layer, p.layers.length - 1), head = useMean() ? "mean" : Math.min(state.head, p.heads - 1);
    const key = `${li}/${head}`;
    if (!cache.has(key)) cache.set(key, decode(head === "mean" ? p.mean[li] : p.weights[li][head], p.encoding));
    return cache.get(key);
  }
  const tokenText = (t) => env.K().rows[t];
  const cellName = (image, c) => `r${Math.floor(c / image.cols)}c${c % image.cols}`;
  const whose = () => `layer ${P().layers[Math.min(state.layer, P().layers.length - 1)]}, ` +
    (useMean() ? "mean of the heads" : `head ${state.head}`);

  // --- the elements, built once per page data --------------------------------------------------------------
  let box, bar, summary, legend, legendText, meanBox, tokensBox, chips, picsBox, figures;
  function build() {
    const p = P(), rows = env.K().rows;
    box = document.getElementById("picturebox");
    cache.clear();
    built = env.data();
    const listed = new Map(p.queries.map((t, qi) => [t, qi]));
    const firstOf = new Map(p.images.map((image, n) => [image.tokens[0], n]));
    const inPicture = new Set(p.images.flatMap((image) => image.tokens));
    // A vision-language model's last word (what it reads of the pictures as it answers); an encoder's first token.
    pick.query = p.queries.some((t) => !inPicture.has(t)) ? p.queries.length - 1 : 0;
    pick.preview = -1; pick.patch = null; pick.cursor = null;
    meanBox = el("input", {type: "checkbox", id: "picmean"});
    meanBox.checked = useMean(); meanBox.disabled = meanOnly();
    meanBox.addEventListener("change", () => { pick.mean = meanBox.checked; draw(); });
    legend = el("canvas", {id: "piclegend", width: 120, height: 10, "aria-hidden": "true"});
    legendText = el("span", {id: "piclegendtext"});
    summary = el("p", {class: "hint picsummary", id: "picsummary", "aria-live": "polite"});
    bar = el("div", {class: "picbar"},
      el("label", {title: meanOnly() ? "this page holds the heads' mean only (see the notes)" : "each head's weights averaged"},
        meanBox, " mean of the heads"),
      el("span", {class: "legend"}, legend, legendText));
    tokensBox = el("div", {class: "pictoks", id: "pictokens", role: "toolbar", "aria-label": "the tokens: hover, focus " +
      "or click one to see its attention over the pictures; arrows move"});
    chips = [];
    rows.forEach((label, t) => {
      if (listed.has(t)) {
        const qi = listed.get(t);
        const chip = el("button", {type: "button", class: "ptok" + (env.K().rowSpecial[t] ? " special" : ""),
          "data-q": qi, "data-token": t, tabindex: "-1", title: `token ${t}: ${label}`},
          el("span", {class: "ptext"}, label), el("small", {class: "pw"}, ""));
        chip.addEventListener("mouseenter", () => { pick.preview = qi; draw(); });
        chip.addEventListener("mouseleave", () => { if (pick.preview === qi) { pick.preview = -1; draw(); } });
        chip.addEventListener("focus", () => choose(qi));
        chip.addEventListener("click", () => choose(qi));
        chip.addEventListener("keydown", (e) => {
          const step = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1}[e.key];
          if (step) { e.preventDefault(); chips[Math.max(0, Math.min(chips.length - 1, qi + step))].focus(); }
          if (e.key === "Escape" && pick.patch) { pick.patch = null; draw(); }
        });
        chips[qi] = chip;
        tokensBox.append(chip);
      } else if (firstOf.has(t) && !inPicture.has(p.queries[0])) {  // a text beside pictures: where each one stands
        const image = p.images[firstOf.get(t)];
        tokensBox.append(el("span", {class: "pchip", title: `${image.tokens.length} tokens of ${image.label}`},
          `${image.label} (${image.rows}×${image.cols})`));
      }
    });
    picsBox = el("div", {class: "pics"});
    figures = p.images.map((image, n) => {
      const short = Math.min(image.width, image.height), long = Math.max(image.width, image.height);
      const scale = Math.max(1, Math.min(MIN_SIDE / short, MAX_SIDE / long));
      const shownW = Math.round(image.width * scale), shownH = Math.round(image.height * scale);
      const img = el("img", {src: image.src, width: shownW, height: shownH, alt: `${image.label}: ${image.name}`});
      if (scale > 1.5) img.style.imageRendering = "pixelated";
      const canvas = el("canvas", {class: "heat", tabindex: "0", role: "img", "data-picture": n,
        "aria-label": `${image.label}: heat over its ${image.rows}×${image.cols} patches; click a patch, or move with ` +
          "the arrows and press Enter, to see which tokens attend to it; Esc goes back to the token"});
      const frame = el("div", {class: "picframe"}, img, canvas);
      frame.style.width = shownW + "px";
      const caption = el("figcaption", {}, `${image.label}${image.name ? " · " + image.name : ""} · ` +
        `${image.size[0]}×${image.size[1]} px · ${image.rows}×${image.cols} patches (${image.layout})`);
      const figure = el("figure", {class: "pic"}, frame, caption);
      canvas.addEventListener("mousemove", (e) => hover(n, e));
      canvas.addEventListener("mouseleave", hideTip);
      canvas.addEventListener("click", (e) => { const c = cellAt(n, e); if (c >= 0) { pick.cursor = null; hideTip(); choosePatch(n, c); } });
      canvas.addEventListener("keydown", (e) => keys(n, e));
      // The keyboard's cursor (dashed) where the picture was reached by the keyboard, not by a click.
      canvas.addEventListener("focus", () => { if (canvas.matches(":focus-visible")) { pick.cursor = [n, start(n)]; draw(); } });
      canvas.addEventListener("blur", () => { pick.cursor = null; draw(); });
      picsBox.append(figure);
      return {image, canvas, frame, values: null, argmax: -1};
    });
    box.replaceChildren(bar, summary, tokensBox, picsBox);
  }
  // Where the keyboard's cursor starts on picture n: the patch chosen, else the strongest one drawn.
  const start = (n) => (pick.patch && pick.patch[0] === n ? pick.patch[1] : Math.max(0, figures[n].argmax));

  function choose(qi) {
    if (pick.query === qi && pick.patch === null && pick.preview === -1) return;
    pick.query = qi; pick.patch = null; pick.preview = -1;
    draw();
  }
  function choosePatch(n, c) {
    pick.patch = [n, c]; pick.preview = -1;
    draw();
  }
  function keys(n, e) {
    const image = P().images[n], at = pick.cursor && pick.cursor[0] === n ? pick.cursor[1] : start(n);
    let r = Math.floor(at / image.cols), c = at % image.cols;
    if (e.key === "ArrowLeft") c = Math.max(0, c - 1); else if (e.key === "ArrowRight") c = Math.min(image.cols - 1, c + 1);
    else if (e.key === "ArrowUp") r = Math.max(0, r - 1); else if (e.key === "ArrowDown") r = Math.min(image.rows - 1, r + 1);
    else if (e.key === "Enter" || e.key === " ") { e.preventDefault(); choosePatch(n, at); return; }
    else if (e.key === "Escape") { pick.patch = null; draw(); return; }
    else return;
    e.preventDefault();
    pick.cursor = [n, r * image.cols + c];
    draw();
  }
  // The patch under the pointer (the last box holding it: a picture's boxes may overlap by a rounding), or −1.
  function cellAt(n, e) {
    const {image, canvas} = figures[n], r = canvas.getBoundingClientRect();
    const x = ((e.clientX - r.left) / r.width) * image.size[0], y = ((e.clientY - r.top) / r.height) * image.size[1];
    for (let c = image.boxes.length - 1; c >= 0; c--) {
      const [x0, y0, x1, y1] = image.boxes[c];
      if (x >= x0 && x < x1 && y >= y0 && y < y1) return c;
    }
    return -1;
  }
  function hover(n, e) {
    const c = cellAt(n, e), figure = figures[n];
    if (c < 0) return hideTip();
    const value = figure.values ? figure.values[c] : null;
    const what = figure.mode === "patch" ? `its weight on ${pick.patch ? cellName(P().images[pick.patch[0]], pick.patch[1]) : "the patch"}`
      : `weight of ${tokenText(P().queries[current()])}`;
    showTip(e, `${figure.image.label} · ${cellName(figure.image, c)} (token ${figure.image.positions[c]})` +
      (value === null || Number.isNaN(value) ? "" : `\n${what}: ${fmt(value)}`) + "\nclick: which tokens attend to it");
  }
  const current = () => (pick.preview >= 0 ? pick.preview : pick.query);

  // --- drawing ---------------------------------------------------------------------------------------------
  const cmap = () => env.data().cmap;
  function paintLegend(top) {
    const ctx = legend.getContext("2d"), table = cmap();
    for (let x = 0; x < legend.width; x++) {
      const [R, G, B] = table[Math.round((x / (legend.width - 1)) * 255)];
      ctx.fillStyle = `rgb(${R},${G},${B})`; ctx.fillRect(x, 0, 1, legend.height);
    }
    legendText.textContent = `0 … ${fmt(top)}`;
  }
  // One picture: each patch's box filled in the colour map's colour of value / top, more opaque for a larger weight
  // (values NaN: no heat there); the patch chosen outlined, the keyboard's cursor dashed.
  function paint(n, values, top) {
    const {image, canvas} = figures[n], ratio = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(canvas.clientWidth * ratio)), h = Math.max(1, Math.round(canvas.clientHeight * ratio));
    if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
    const ctx = canvas.getContext("2d"), sx = w / image.size[0], sy = h / image.size[1], table = cmap();
    ctx.clearRect(0, 0, w, h);
    let best = -1;
    if (values) {
      // The grid's colours as a canvas of one pixel a patch, drawn over the region the patches cover with the
      // browser's smoothing: heat smooth at the picture's resolution, as the PNG draws it (a block per patch where
      // the grid is not one rows × cols rectangle of boxes).
      const regular = image.rows * image.cols === image.boxes.length;
      const cells = regular ? document.createElement("canvas") : null;
      const grid = cells ? cells.getContext("2d") : null;
      const pixels = grid ? grid.createImageData(image.cols, image.rows) : null;
      if (cells) { cells.width = image.cols; cells.height = image.rows; }
      for (let c = 0; c < image.boxes.length; c++) {
        const v = values[c];
        if (Number.isNaN(v)) continue;
        if (best < 0 || v > values[best]) best = c;
        const t = Math.max(0, Math.min(1, top > 0 ? v / top : 0)), [R, G, B] = table[Math.round(t * 255)];
        const alpha = 0.15 + 0.55 * Math.sqrt(t);  // more opaque where stronger: the picture shows through
        if (pixels) {
          pixels.data.set([R, G, B, Math.round(alpha * 255)], c * 4);
        } else {
          const [x0, y0, x1, y1] = image.boxes[c];
          ctx.fillStyle = `rgba(${R},${G},${B},${alpha.toFixed(3)})`;
          ctx.fillRect(x0 * sx, y0 * sy, (x1 - x0) * sx, (y1 - y0) * sy);
        }
      }
      if (cells && grid && pixels) {
        grid.putImageData(pixels, 0, 0);
        const xs = image.boxes.map((b) => [b[0], b[2]]).flat(), ys = image.boxes.map((b) => [b[1], b[3]]).flat();
        const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
        ctx.save(); ctx.imageSmoothingEnabled = true; ctx.imageSmoothingQuality = "high";
        ctx.drawImage(cells, x0 * sx, y0 * sy, (x1 - x0) * sx, (y1 - y0) * sy);
        ctx.restore();
      }
    }
    const outline = (c, dashed) => {
      const [x0, y0, x1, y1] = image.boxes[c];
      ctx.save(); ctx.lineWidth = 2 * ratio; ctx.setLineDash(dashed ? [4 * ratio, 3 * ratio] : []);
      ctx.strokeStyle = "#000"; ctx.strokeRect(x0 * sx + ratio, y0 * sy + ratio, (x1 - x0) * sx - 2 * ratio, (y1 - y0) * sy - 2 * ratio);
      ctx.strokeStyle = "#fff"; ctx.lineWidth = ratio;
      ctx.strokeRect(x0 * sx + 2 * ratio, y0 * sy + 2 * ratio, (x1 - x0) * sx - 4 * ratio, (y1 - y0) * sy - 4 * ratio);
      ctx.restore();
    };
    if (pick.patch && pick.patch[0] === n) outline(pick.patch[1], false);
    if (pick.cursor && pick.cursor[0] === n) outline(pick.cursor[1], true);
    figures[n].values = values;
    figures[n].argmax = best;
    canvas.dataset.argmax = String(best);
    return best;
  }
  async function draw() {
    if (!P()) return;
    if (built !== env.data() || !document.getElementById("picturebox").contains(tokensBox)) build();
    meanBox.checked = useMean();
    const mine = ++serial, p = P(), m = await weights();
    if (mine !== serial) return;
    const Q = p.queries.length, K = keyCount();
    let top = 0;
    for (const chip of chips) {
      chip.classList.remove("on", "kept");
      chip.style.background = ""; chip.lastChild.textContent = "";
      chip.tabIndex = -1;
    }
    const kept = chips[pick.query];
    kept.classList.add("kept"); kept.tabIndex = 0;
    if (pick.patch && pick.preview < 0) {  // which tokens attend to the patch: its column
      const [n, c] = pick.patch, image = p.images[n], k = image.at + c, column = new Float32Array(Q);
      for (let qi = 0; qi < Q; qi++) { column[qi] = m[qi * K + k]; top = Math.max(top, column[qi]); }
      let strongest = 0;
      chips.forEach((chip, qi) => {
        const t = top > 0 ? column[qi] / top : 0, [R, G, B] = cmap()[Math.round(t * 255)];
        chip.style.background = `rgba(${R},${G},${B},${(0.1 + 0.75 * t).toFixed(3)})`;
        chip.lastChild.textContent = fmt(column[qi]);
        chip.classList.toggle("dark", t > 0.5 && R + G + B < 380);
        if (column[qi] > column[strongest]) strongest = qi;
      });
      // Where the tokens listed are a picture's patches (an encoder), their weights on the patch are heat there too.
      const listed = new Map(p.queries.map((t, qi) => [t, qi]));
      figures.forEach((figure, f) => {
        const values = new Float32Array(figure.image.positions.length).fill(NaN);
        let any = false;
        figure.image.positions.forEach((t, cell) => { if (listed.has(t)) { values[cell] = column[listed.get(t)]; any = true; } });
        figure.mode = "patch";
        paint(f, any ? values : null, top);
      });
      box.dataset.mode = "patch"; box.dataset.patch = `${n}/${c}`; delete box.dataset.query;
      summary.textContent = `${image.label}, patch ${cellName(image, c)} (token ${image.positions[c]}): each token's weight ` +
        `on it (${whose()}); most from ${tokenText(p.queries[strongest])} (${fmt(column[strongest])}). Esc or a token ` +
        "goes back.";
    } else {  // a token's weights over every picture: its row
      const qi = current(), row = m.subarray(qi * K, (qi + 1) * K);
      for (let k = 0; k < K; k++) top = Math.max(top, row[k]);
      chips[qi].classList.add("on");
      const parts = [];
      figures.forEach((figure, f) => {
        const image = figure.image, values = row.slice(image.at, image.at + image.positions.length);
        figure.mode = "token";
        const best = paint(f, values, top);
        let share = 0;
        for (const v of values) share += v;
        parts.push(`${p.images.length > 1 ? image.label + ": " : ""}${(share * 100).toFixed(1)}% on its patches, most on ` +
          `${cellName(image, best)} (${fmt(values[best])})`);
      });
      box.dataset.mode = "token"; box.dataset.query = String(p.queries[qi]); delete box.dataset.patch;
      summary.textContent = `${tokenText(p.queries[qi])} (token ${p.queries[qi]}, ${whose()}): ${parts.join("; ")}.`;
    }
    paintLegend(top);
    box.dataset.drawn = String(mine);
  }
  window.addEventListener("resize", () => { if (state.view === "picture" && P()) draw(); });
  return {draw, choose, choosePatch, pick, weights};
}
