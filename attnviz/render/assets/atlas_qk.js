// The atlas page's joint query-key embedding of one head (after AttentionViz): every sampled token's query and
// key as a point on the head's two principal components. Hover names a point's token in its text; a click keeps
// it and joins its query to its key; the find box marks every token with that text. Data: data.embedding.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("atlas-data").textContent);
  const E = data.embedding;
  if (!E) return;
  const N = E.tokens.length, S = 360, PAD = 8, COLOURS = ["#e66100", "#5d3a9b"], KINDS = ["query", "key"];
  const starts = new Int32Array(N);  // where each token's text begins among the tokens
  for (let i = 1; i < N; i++) starts[i] = E.text[i] === E.text[i - 1] ? starts[i - 1] : i;
  const plain = (t) => t.replace(/^(##|Ġ|▁)/, "").toLowerCase();

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  window.attnvizEmbedding = function (item, panel) {
    const head = E.heads[item.layer + "," + item.head];
    const cells = Uint8Array.from(atob(head.points), (c) => c.charCodeAt(0));  // [2, N, 2]
    // the view: a zoom k about an origin (ox, oy) of the unzoomed picture; the wheel zooms, a drag pans
    let k = 1, ox = 0, oy = 0, pinned = -1, found = [], dragged = null;
    const px = (kind, i) => (PAD + (cells[(kind * N + i) * 2] / 255) * (S - 2 * PAD) - ox) * k;
    const py = (kind, i) => (S - PAD - (cells[(kind * N + i) * 2 + 1] / 255) * (S - 2 * PAD) - oy) * k;
    const section = el("section", { id: "atlasqk" });
    section.appendChild(el("h3", {}, "Queries and keys, embedded together"));
    section.appendChild(el("p", { class: "note" }, N + " tokens from " + E.n_texts + " texts (chosen at random, seed " +
      E.seed + "). Queries and keys are scaled to equal mean norms and the keys moved to the queries' centroid, " +
      "which leaves the attention unchanged; then both are projected on their two principal components (" +
      Math.round(head.explained[0] * 100) + "% and " + Math.round(head.explained[1] * 100) + "% of the variance). " +
      "A query lies near the keys it attends to when its scores are large. The wheel zooms, a drag pans, a " +
      "double click shows it all again."));
    const controls = el("div", { class: "qkcontrols" });
    const boxes = KINDS.map((kind, k) => {
      const label = el("label", { style: "color:" + COLOURS[k] });
      const box = el("input", { type: "checkbox", id: "atlasqk" + kind });
      box.checked = true;
      label.append(box, kind === "query" ? " queries" : " keys");
      controls.appendChild(label);
      box.addEventListener("change", paint);
      return box;
    });
    const find = el("input", { type: "search", id: "atlasqkfind", placeholder: "find a token", "aria-label": "find a token" });
    const count = el("span", { class: "note", id: "atlasqkcount" });
    controls.append(find, count);
    section.appendChild(controls);
    const wrap = el("div", { class: "qkwrap" });
    const canvas = el("canvas", { width: S, height: S, id: "atlasqkcanvas", role: "img", tabindex: "0",
      "aria-label": "queries and keys of head L" + item.layer + " H" + item.head + " on two principal components" });
    const tip = el("div", { id: "atlasqktip", role: "status", "aria-live": "polite" });
    wrap.append(canvas, tip);
    section.appendChild(wrap);
    panel.appendChild(section);
    const ctx = canvas.getContext("2d");

    function paint() {
      ctx.clearRect(0, 0, S, S);
      ctx.globalAlpha = found.length || pinned >= 0 ? 0.25 : 0.55;
      for (const k of [1, 0]) {
        if (!boxes[k].checked) continue;
        ctx.fillStyle = COLOURS[k];
        for (let i = 0; i < N; i++) ctx.fillRect(px(k, i) - 1.5, py(k, i) - 1.5, 3, 3);
      }
      ctx.globalAlpha = 1;
      ctx.strokeStyle = "#000";
      for (const i of found) mark(i, 3.5);
      if (pinned >= 0) {
        ctx.beginPath(); ctx.moveTo(px(0, pinned), py(0, pinned)); ctx.lineTo(px(1, pinned), py(1, pinned)); ctx.stroke();
        mark(pinned, 5);
      }
    }
    function mark(i, r) {
      for (const k of [0, 1]) {
        if (!boxes[k].checked) continue;
        ctx.fillStyle = COLOURS[k];
        ctx.beginPath(); ctx.arc(px(k, i), py(k, i), r, 0, 2 * Math.PI); ctx.fill(); ctx.stroke();
      }
    }
    function nearest(x, y) {
      let best = null, dist = 64;  // within 8 px
      for (const k of [0, 1]) {
        if (!boxes[k].checked) continue;
        for (let i = 0; i < N; i++) {
          const d = (px(k, i) - x) ** 2 + (py(k, i) - y) ** 2;
          if (d < dist) { dist = d; best = [k, i]; }
        }
      }
      return best;
    }
    function describe(k, i) {  // the token, its text and where it is, with a few tokens around it
      tip.replaceChildren();
      tip.appendChild(el("strong", { style: "color:" + COLOURS[k] }, KINDS[k] + " "));
      tip.appendChild(el("span", { class: "token" }, E.tokens[i]));
      tip.appendChild(document.createTextNode(" · text #" + E.text[i] + ", token " + E.position[i]));
      const context = el("div", { class: "context" });
      const first = Math.max(starts[i], i - 8);
      for (let j = first; j < N && j <= i + 8 && E.text[j] === E.text[i]; j++) {
        context.appendChild(j === i ? el("mark", {}, E.tokens[j]) : document.createTextNode(E.tokens[j]));
        context.appendChild(document.createTextNode(" "));
      }
      tip.appendChild(context);
      tip.dataset.kind = KINDS[k];
      tip.dataset.index = i;
    }
    function local(e) {
      const r = canvas.getBoundingClientRect();
      return [(e.clientX - r.left) * (S / r.width), (e.clientY - r.top) * (S / r.height)];
    }
    const at = (e) => nearest(...local(e));
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const [x, y] = local(e), next = Math.min(64, Math.max(1, k * (e.deltaY < 0 ? 1.25 : 0.8)));
      ox += x / k - x / next; oy += y / k - y / next; k = next;  // the point under the cursor stays put
      if (k === 1) ox = oy = 0;
      paint();
    }, { passive: false });
    canvas.addEventListener("mousedown", (e) => { dragged = [...local(e), false]; });
    window.addEventListener("mouseup", () => { setTimeout(() => { dragged = null; }, 0); });
    canvas.addEventListener("dblclick", () => { k = 1; ox = oy = 0; paint(); });
    canvas.addEventListener("mousemove", (e) => {
      if (dragged && e.buttons) {
        const [x, y] = local(e);
        ox -= (x - dragged[0]) / k; oy -= (y - dragged[1]) / k;
        dragged = [x, y, true];
        paint();
        return;
      }
      const hit = at(e);
      if (hit) describe(hit[0], hit[1]);
      else if (pinned < 0) tip.replaceChildren();
    });
    canvas.addEventListener("click", (e) => {
      if (dragged && dragged[2]) return;  // the end of a drag, not a click
      const hit = at(e);
      pinned = hit ? hit[1] : -1;
      if (hit) describe(hit[0], hit[1]);
      paint();
    });
    canvas.addEventListener("keydown", (e) => {
      if (e.key === "Escape") { pinned = -1; tip.replaceChildren(); paint(); }
    });
    find.addEventListener("input", () => {
      const want = plain(find.value.trim());
      found = [];
      if (want) for (let i = 0; i < N; i++) if (plain(E.tokens[i]) === want) found.push(i);
      count.textContent = want ? found.length + " token" + (found.length === 1 ? "" : "s") : "";
      paint();
    });
    paint();
    // where a point is drawn, for scripts and tests: [x, y] in the canvas's pixels
    window.attnvizAtlas.pointAt = (kind, i) => [px(KINDS.indexOf(kind), i), py(KINDS.indexOf(kind), i)];
  };
})();
