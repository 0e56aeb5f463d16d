// The atlas page's joint query-key embedding of one head (after AttentionViz): every sampled token's query and
// key as a point on the head's two principal components. Hover names a point's token in its text; a click keeps
// it and joins its query to its key (← and → then step through the tokens, Esc lets go); the find box marks
// every token with that text; the wheel zooms, a drag pans, a double click shows it all. Each head keeps its
// view, kept token and search while other statistics are chosen. Data: data.embedding, through atlas.js's window.attnvizAtlas.
(function () {
  "use strict";
  const atlas = window.attnvizAtlas;
  const E = atlas && atlas.data.embedding;
  if (!E) return;
  const el = atlas.el;
  const N = E.tokens.length, S = 360, PAD = 8, COLOURS = ["#e66100", "#5d3a9b"], KINDS = ["query", "key"];
  const starts = new Int32Array(N);  // where each token's text begins among the tokens
  for (let i = 1; i < N; i++) starts[i] = E.text[i] === E.text[i - 1] ? starts[i - 1] : i;
  const plain = (t) => t.replace(/^(##|Ġ|▁)/, "").toLowerCase();
  const states = new Map();  // per head: its zoom, pan, kept token and search
  let dragging = null;  // {state, x, y, moved} while the mouse button is down on a canvas
  window.addEventListener("mouseup", () => { setTimeout(() => { dragging = null; }, 0); });

  atlas.embedding = function (item, panel) {
    const name = item.layer + "," + item.head, head = E.heads[name];
    if (!states.has(name)) states.set(name, { k: 1, ox: 0, oy: 0, pinned: -1, kind: 0, find: "", shown: [true, true] });
    const st = states.get(name);
    const cells = Uint8Array.from(atob(head.points), (c) => c.charCodeAt(0));  // [2, N, 2]
    const px = (kind, i) => (PAD + (cells[(kind * N + i) * 2] / 255) * (S - 2 * PAD) - st.ox) * st.k;
    const py = (kind, i) => (S - PAD - (cells[(kind * N + i) * 2 + 1] / 255) * (S - 2 * PAD) - st.oy) * st.k;
    let found = [];
    const section = el("section", { id: "atlasqk" });
    section.appendChild(el("h3", {}, "Queries and keys, embedded together"));
    section.appendChild(el("p", { class: "note" }, N + " tokens from " + E.n_texts + " texts (chosen at random, seed " +
      E.seed + "). Queries and keys are scaled to equal mean norms and the keys moved to the queries' centroid, " +
      "which leaves a plain head's attention unchanged; then both are projected on their two principal components (" +
      Math.round(head.explained[0] * 100) + "% and " + Math.round(head.explained[1] * 100) + "% of the variance). " +
      "A query lies near the keys it attends to when its scores are large. The wheel zooms, a drag pans, a " +
      "double click shows it all again; click a point, then ← and → step through the tokens."));
    const controls = el("div", { class: "qkcontrols" });
    const boxes = KINDS.map((kind, k) => {
      const label = el("label", { style: "color:" + COLOURS[k] });
      const box = el("input", { type: "checkbox", id: "atlasqk" + kind });
      box.checked = st.shown[k];
      label.append(box, kind === "query" ? " queries" : " keys");
      controls.appendChild(label);
      box.addEventListener("change", () => { st.shown[k] = box.checked; paint(); });
      return box;
    });
    const find = el("input", { type: "search", id: "atlasqkfind", placeholder: "find a token", "aria-label": "find a token" });
    const count = el("span", { class: "note", id: "atlasqkcount" });
    controls.append(find, count);
    section.appendChild(controls);
    const wrap = el("div", { class: "qkwrap" });
    const canvas = el("canvas", { width: S, height: S, id: "atlasqkcanvas", role: "img", tabindex: "0",
      "aria-label": "queries and keys of head L" + item.layer + " H" + item.head + " on two principal components; " +
        "click a point, then the arrow keys step through the tokens" });
    const tip = el("div", { id: "atlasqktip", role: "status", "aria-live": "off" });
    wrap.append(canvas, tip);
    section.appendChild(wrap);
    panel.appendChild(section);
    const ctx = canvas.getContext("2d");

    function paint() {
      ctx.clearRect(0, 0, S, S);
      ctx.globalAlpha = found.length || st.pinned >= 0 ? 0.25 : 0.55;
      for (const k of [1, 0]) {
        if (!boxes[k].checked) continue;
        ctx.fillStyle = COLOURS[k];
        for (let i = 0; i < N; i++) ctx.fillRect(px(k, i) - 1.5, py(k, i) - 1.5, 3, 3);
      }
      ctx.globalAlpha = 1;
      ctx.strokeStyle = "#000";
      for (const i of found) mark(i, 3.5);
      if (st.pinned >= 0) {
        ctx.beginPath(); ctx.moveTo(px(0, st.pinned), py(0, st.pinned)); ctx.lineTo(px(1, st.pinned), py(1, st.pinned));
        ctx.stroke();
        mark(st.pinned, 5);
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
    function describe(k, i, announce) {  // the token, its text and where it is, with a few tokens around it
      tip.setAttribute("aria-live", announce ? "polite" : "off");  // a hover is not read aloud; a kept token is
      tip.replaceChildren();
      tip.appendChild(el("strong", { style: "color:" + COLOURS[k] }, KINDS[k] + " "));
      tip.appendChild(el("span", { class: "token" }, E.tokens[i]));
      tip.appendChild(document.createTextNode(" · text #" + E.text[i] + ", token " + E.position[i]));
      const context = el("div", { class: "context" });
      for (let j = Math.max(starts[i], i - 8); j < N && j <= i + 8 && E.text[j] === E.text[i]; j++) {
        context.appendChild(j === i ? el("mark", {}, E.tokens[j]) : document.createTextNode(E.tokens[j]));
        context.appendChild(document.createTextNode(" "));
      }
      tip.appendChild(context);
      tip.dataset.kind = KINDS[k];
      tip.dataset.index = i;
    }
    function rest() {  // what the tip shows when no point is under the mouse
      if (st.pinned >= 0) describe(st.kind, st.pinned, false);
      else tip.replaceChildren();
    }
    function local(e) {  // the event's place in the canvas's own pixels (its border left out)
      const r = canvas.getBoundingClientRect();
      return [(e.clientX - r.left - canvas.clientLeft) * (S / canvas.clientWidth),
        (e.clientY - r.top - canvas.clientTop) * (S / canvas.clientHeight)];
    }
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const [x, y] = local(e), next = Math.min(64, Math.max(1, st.k * (e.deltaY < 0 ? 1.25 : 0.8)));
      st.ox += x / st.k - x / next; st.oy += y / st.k - y / next; st.k = next;  // the point under the cursor stays
      if (st.k === 1) st.ox = st.oy = 0;
      paint();
    }, { passive: false });
    canvas.addEventListener("mousedown", (e) => { const [x, y] = local(e); dragging = { st: st, x: x, y: y, moved: false }; });
    canvas.addEventListener("dblclick", () => { st.k = 1; st.ox = st.oy = 0; paint(); });
    canvas.addEventListener("mousemove", (e) => {
      const [x, y] = local(e);
      if (dragging && dragging.st === st && e.buttons) {
        st.ox -= (x - dragging.x) / st.k; st.oy -= (y - dragging.y) / st.k;
        Object.assign(dragging, { x: x, y: y, moved: true });
        paint();
        return;
      }
      const hit = nearest(x, y);
      if (hit) describe(hit[0], hit[1], false);
      else rest();
    });
    canvas.addEventListener("mouseleave", rest);
    canvas.addEventListener("click", (e) => {
      if (dragging && dragging.moved) return;  // the end of a drag, not a click
      const hit = nearest(...local(e));
      st.pinned = hit ? hit[1] : -1;
      st.kind = hit ? hit[0] : 0;
      if (hit) describe(hit[0], hit[1], true);
      else tip.replaceChildren();
      paint();
    });
    canvas.addEventListener("keydown", (e) => {
      if (e.key === "Escape") { st.pinned = -1; tip.replaceChildren(); paint(); return; }
      if (e.key !== "ArrowRight" && e.key !== "ArrowLeft") return;
      e.preventDefault();
      st.pinned = st.pinned < 0 ? 0 : (st.pinned + (e.key === "ArrowRight" ? 1 : N - 1)) % N;
      describe(st.kind, st.pinned, true);
      paint();
    });
    function search() {
      st.find = find.value;
      const want = plain(find.value.trim());
      found = [];
      if (want) for (let i = 0; i < N; i++) if (plain(E.tokens[i]) === want) found.push(i);
      count.textContent = want ? found.length + " token" + (found.length === 1 ? "" : "s") : "";
      paint();
    }
    find.addEventListener("input", search);
    find.value = st.find;
    search();
    rest();
    // where a point is drawn, for scripts and tests: [x, y] in the canvas's pixels
    atlas.pointAt = (kind, i) => [px(KINDS.indexOf(kind), i), py(KINDS.indexOf(kind), i)];
  };
})();
