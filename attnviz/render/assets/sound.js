// attnviz view --audio: a Whisper model hearing a clip. The spectrogram with a seconds axis, the transcript's words
// at their times (hover or focus one: its cross-attention along the clip; click or Enter: hear it), every token's
// cross-attention, and the alignment heads' normalised weights with the DTW path the word times come from.
// Data: #sound-data (attnviz.views.sound_page.SoundPage.data). Every text of the data (a transcript, a file name)
// is written with textContent, never as markup. Weights are decoded with attnvizDecode (tiles.js).
// Served (attnviz serve --audio: the data's `live`): a transcript typed in #live-text is sent to live.endpoint, and
// its answer (the same data for that transcript, less the clip's sound and spectrogram, embedded once) drawn in place.
(function () {
  "use strict";
  let data = JSON.parse(document.getElementById("sound-data").textContent);
  const clip = { audio: data.audio, spectrogram: data.spectrogram }, live = data.live;  // the same for every transcript
  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  let span = 1, rows = 0;  // seconds the axis covers; the token rows (a transcript's)
  const fmt = (s) => (s < 10 ? s.toFixed(2) : s.toFixed(1));
  const number = (v) => (Math.abs(v) >= 0.01 || v === 0 ? v.toFixed(3) : v.toExponential(2));
  const wordText = (w) => w.text.trim() || "\u2423";
  const initialChoice = () => (data.initial && data.initial.layer !== null && data.initial.layer !== undefined
    ? data.initial.layer + "," + data.initial.head : "mean");
  const state = { word: -1, choice: initialChoice(), playing: -1 };
  const drawn = { heat: 0, tokens: 0, alignment: 0 };

  // --- the weights, decoded once each -------------------------------------------------------------------------------
  const cache = new Map();
  function choiceName(choice) {
    if (choice === "mean") {
      const names = data.alignmentHeads.map(([l, h]) => headName(l, h));
      return "the alignment heads' mean (" + (names.length <= 4 ? names.join(", ") : names.length + " heads") + ")";
    }
    const [l, h] = choice.split(",").map(Number);
    return "head " + headName(l, h);
  }
  function weights(choice) {  // {values: Float32Array [rows × cols], cols, pool, vmax}
    if (!cache.has(choice)) {
      let job;
      if (choice === "mean") {
        const m = data.alignmentMean;
        job = attnvizDecode(m.values, m.encoding).then((values) => ({ values, cols: data.positions, pool: 1, vmax: m.vmax }));
      } else {
        const [l, h] = choice.split(",").map(Number), k = data.heat;
        job = attnvizDecode(k.values[l][h], k.encoding).then((values) => ({ values, cols: k.cols, pool: k.pool, vmax: k.vmax[l][h] }));
      }
      cache.set(choice, job);
    }
    return cache.get(choice);
  }
  let alignment = Promise.resolve(new Float32Array(0));

  // --- colours, bars and axes -----------------------------------------------------------------------------------------
  const colourOf = (table, t) => table[Math.max(0, Math.min(255, Math.round(t * 255)))];
  function colourbar(box, table, top, bottom, what) {
    box.replaceChildren();
    const canvas = el("canvas", { width: "1", height: "256", "aria-hidden": "true" });
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(1, 256);
    for (let i = 0; i < 256; i++) img.data.set([...table[255 - i], 255], i * 4);
    ctx.putImageData(img, 0, 0);
    const ends = el("div", { class: "ends" });
    ends.append(el("span", {}, top), el("span", {}, bottom));
    box.append(canvas, ends, el("span", { class: "what" }, what));
  }
  function axes() {
    const width = document.querySelector(".axis").clientWidth || 800;
    const steps = [0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10];
    const step = steps.find((s) => (s / span) * width >= 56) || 10;
    for (const axis of document.querySelectorAll(".axis")) {
      axis.replaceChildren();
      for (let k = 0; k * step <= span + 1e-9; k++) {
        const t = k * step;
        const tick = el("span", { class: "tick" }, String(+t.toFixed(2)));
        tick.style.left = (t / span) * 100 + "%";
        axis.appendChild(tick);
      }
      axis.appendChild(el("span", { class: "name" }, "time (seconds)"));
    }
  }
  const x = (seconds, width) => (seconds / span) * width;

  // --- the spectrogram (the clip's: drawn once) ---------------------------------------------------------------------
  const spec = clip.spectrogram;
  const image = $("spectrogram");
  image.src = spec.src;
  image.style.width = ((spec.frames * spec.frameSeconds) / span) * 100 + "%";
  image.alt = "the log-mel spectrogram of " + data.clip + ": " + spec.mels + " mel bins by " + spec.frames + " frames";
  colourbar($("specbar"), spec.cmap, "loud", "quiet", "log-mel energy");
  $("specbar").title = "log-mel energy as the feature extractor scales it, " + number(spec.low) + " to " + number(spec.high);

  // --- notes and the heads' choice ----------------------------------------------------------------------------------
  const select = $("heads");
  function headChoices() {  // the notes, and every head to choose from (the choice kept where the heads are the same)
    $("notes").replaceChildren(...data.notes.map((note) => el("li", {}, note)));
    const kept = state.choice;
    select.replaceChildren(el("option", { value: "mean" }, choiceName("mean")));
    const aligned = new Set(data.alignmentHeads.map(([l, h]) => l + "," + h));
    for (let l = 0; l < data.layers; l++) {
      const group = el("optgroup", { label: "layer " + l });
      for (let h = 0; h < data.heads; h++) {
        group.appendChild(el("option", { value: l + "," + h }, headName(l, h) + (aligned.has(l + "," + h) ? " (an alignment head)" : "")));
      }
      select.appendChild(group);
    }
    select.value = kept;
    if (select.value !== kept) select.value = initialChoice();
    state.choice = select.value;
  }
  select.addEventListener("change", () => { state.choice = select.value; draw(); });

  // --- the words, at their times --------------------------------------------------------------------------------------
  const wordBox = $("words"), wordHead = wordBox.querySelector(".playhead");
  let buttons = [];
  function wordButtons() {  // a button per word, at its time, over a mark of its span
    buttons = data.words.map((w, i) => {
      const button = el("button", { type: "button", class: "word", "data-word": String(i),
        "aria-label": wordText(w) + ", " + fmt(w.start) + " to " + fmt(w.end) + " seconds; Enter plays it",
        title: wordText(w) + ": " + fmt(w.start) + "–" + fmt(w.end) + " s (click to hear it)" }, wordText(w));
      const mark = el("div", { class: i % 2 ? "span odd" : "span", "aria-hidden": "true", title: fmt(w.start) + "–" + fmt(w.end) + " s" });
      button.addEventListener("mouseenter", () => choose(i));
      button.addEventListener("focus", () => choose(i));
      button.addEventListener("click", () => { choose(i); playWord(i); });
      button.addEventListener("keydown", (e) => {
        const to = e.key === "ArrowRight" ? i + 1 : e.key === "ArrowLeft" ? i - 1 : -1;
        if (to >= 0 && to < buttons.length) { e.preventDefault(); buttons[to].button.focus(); }
      });
      wordBox.append(mark, button);
      return { button, mark };
    });
    if (!data.words.length) wordBox.appendChild(el("span", { class: "axistitle" }, "the transcript has no words"));
  }
  const LANES = 4;  // rows of words at most; past them a word may cover another (its time is in its tooltip)
  function placeWords() {  // each word from its start, at least as wide as its time; a word that would cover the one before goes a lane down
    const width = wordBox.clientWidth, lanes = [];
    data.words.forEach((w, i) => {
      const { button, mark } = buttons[i];
      const left = x(w.start, width), right = x(w.end, width);
      mark.style.left = left + "px";
      mark.style.width = Math.max(2, right - left) + "px";
      button.style.left = left + "px";
      button.style.minWidth = Math.max(12, right - left - 1) + "px";
      button.style.maxWidth = Math.max(60, width - left) + "px";
      const wide = button.offsetWidth;
      let lane = lanes.findIndex((end) => end <= left + 1);
      if (lane < 0) lane = lanes.length < LANES ? lanes.length : lanes.indexOf(Math.min(...lanes));
      lanes[lane] = left + wide;
      button.style.top = 6 + lane * 27 + "px";
    });
    wordBox.style.height = 6 + Math.max(1, lanes.length) * 27 + 4 + "px";
  }

  // --- the audio (the clip's: embedded once) ------------------------------------------------------------------------
  const audio = $("clip");
  audio.src = clip.audio.src;
  let stopAt = null;
  function say(text) { $("status").textContent = text; }
  function playFrom(start, end, word) {
    audio.pause();
    audio.currentTime = start;
    stopAt = end;
    state.playing = word;
    audio.dataset.start = String(start);
    audio.dataset.end = String(end);
    buttons.forEach((b, i) => b.button.classList.toggle("playing", i === word));
    const playing = audio.play();
    if (playing) playing.catch((err) => { if (err.name !== "AbortError") say("the browser did not play the clip: " + err.message); });
    requestAnimationFrame(follow);
  }
  function playWord(i) { const w = data.words[i]; playFrom(w.start, w.end, i); }
  $("playall").addEventListener("click", () => playFrom(0, null, -1));
  function follow() {  // the playhead, and the end of a word's segment
    if (stopAt !== null && audio.currentTime >= stopAt) { audio.pause(); stopAt = null; }
    for (const head of document.querySelectorAll(".playhead")) {
      head.style.display = audio.currentTime > 0 || !audio.paused ? "block" : "none";
      head.style.left = (audio.currentTime / span) * 100 + "%";
    }
    if (!audio.paused) requestAnimationFrame(follow);
    else buttons.forEach((b) => b.button.classList.remove("playing"));
  }
  audio.addEventListener("seeked", () => requestAnimationFrame(follow));
  audio.addEventListener("play", () => requestAnimationFrame(follow));

  // --- the matrices -------------------------------------------------------------------------------------------------------
  function sized(canvas, height) {  // the canvas at the device's pixels, its context in CSS pixels
    const width = canvas.parentElement.clientWidth || 800, ratio = window.devicePixelRatio || 1;
    canvas.style.height = height + "px";
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    return { ctx, width, height };
  }
  // Rows [from, to) of values [rows × cols] (each col `pool` positions) as cells, at their times.
  function paint(ctx, width, rowHeight, values, cols, pool, from, to, colour) {
    const n = to - from;
    if (n <= 0 || cols <= 0) return;
    const cells = document.createElement("canvas");
    cells.width = cols;
    cells.height = n;
    const c = cells.getContext("2d"), img = c.createImageData(cols, n);
    for (let r = 0; r < n; r++) for (let j = 0; j < cols; j++) {
      img.data.set([...colour(values[(from + r) * cols + j]), 255], (r * cols + j) * 4);
    }
    c.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    const seconds = Math.min(cols * pool, data.positions) * data.secondsPerPosition;
    ctx.drawImage(cells, 0, 0, cols, n, 0, 0, x(seconds, width), n * rowHeight);
  }
  function labels(box, rowHeight, chosen) {
    box.replaceChildren();
    data.tokens.forEach((token, k) => {
      const label = el("div", { class: chosen && k >= chosen[0] && k < chosen[1] ? "chosen" : "" }, token);
      label.style.height = rowHeight + "px";
      label.style.fontSize = Math.max(7, Math.min(12, rowHeight - 2)) + "px";
      box.appendChild(label);
    });
  }
  function outline(ctx, width, rowHeight, chosen, word) {  // the chosen word's rows, and its time
    if (!chosen) return;
    const top = chosen[0] * rowHeight, height = (chosen[1] - chosen[0]) * rowHeight;
    ctx.lineWidth = 3; ctx.strokeStyle = "rgba(0,0,0,.8)";
    ctx.strokeRect(0.5, top, width - 1, height);
    ctx.lineWidth = 1.5; ctx.strokeStyle = "#fff";
    ctx.strokeRect(0.5, top, width - 1, height);
    if (word) {
      ctx.setLineDash([4, 3]);
      ctx.strokeStyle = "#ff5a36"; ctx.lineWidth = 2;
      ctx.strokeRect(x(word.start, width), top + 1, Math.max(2, x(word.end - word.start, width)), height - 2);
      ctx.setLineDash([]);
    }
  }
  const rowHeight = () => Math.max(10, Math.min(20, Math.floor(480 / Math.max(1, rows))));

  let tickets = 0;
  async function drawHeat() {
    const ticket = ++tickets, choice = state.choice, found = await weights(choice), table = data.cmap;
    if (ticket !== tickets) return;  // a later hover or choice draws instead
    const top = found.vmax > 0 ? found.vmax : 1;
    const colour = (v) => colourOf(table, v / top);
    colourbar($("heatbar"), table, number(top), "0", "attention weight");
    colourbar($("tokensbar"), table, number(top), "0", "attention weight");
    // The chosen word's rows: its tokens (and the cut between them).
    const w = data.words[state.word], chosen = w ? w.rows : null;
    const heat = $("heat");
    const strip = 30, n = chosen ? chosen[1] - chosen[0] : 0;
    const { ctx, width } = sized(heat, Math.max(1, n) * strip);
    ctx.clearRect(0, 0, width, Math.max(1, n) * strip);
    const box = $("heatlabels");
    box.replaceChildren();
    if (w) {
      paint(ctx, width, strip, found.values, found.cols, found.pool, chosen[0], chosen[1], colour);
      for (let k = chosen[0]; k < chosen[1]; k++) {
        const label = el("div", {}, "\u201c" + data.tokens[k] + "\u201d");
        label.style.height = strip + "px";
        box.appendChild(label);
      }
      ctx.setLineDash([4, 3]); ctx.strokeStyle = "#ff5a36"; ctx.lineWidth = 2;
      ctx.strokeRect(x(w.start, width), 1, Math.max(2, x(w.end - w.start, width)), n * strip - 2);
      ctx.setLineDash([]);
      // Where the heads look hardest, over the word's rows.
      let best = -1, at = 0;
      for (let k = chosen[0]; k < chosen[1]; k++) for (let j = 0; j < found.cols; j++) {
        const v = found.values[k * found.cols + j];
        if (v > best) { best = v; at = j; }
      }
      const peak = at * found.pool * data.secondsPerPosition, middle = x(peak + found.pool * data.secondsPerPosition / 2, width);
      ctx.fillStyle = "#ff5a36";
      ctx.beginPath(); ctx.moveTo(middle - 6, 0); ctx.lineTo(middle + 6, 0); ctx.lineTo(middle, 9); ctx.fill();
      $("heattitle").textContent = "Where the decoder looks as it writes \u201c" + wordText(w) + "\u201d";
      $("heatnote").textContent = "\u201c" + wordText(w) + "\u201d is timed " + fmt(w.start) + "\u2013" + fmt(w.end) +
        " s (dashed box; its tokens' probability " + w.probability.toFixed(2) + "). " + choiceName(choice)[0].toUpperCase() +
        choiceName(choice).slice(1) + " looks hardest at " + fmt(peak) + " s (\u25bc, weight " + number(best) + ")" +
        (found.pool > 1 ? ", each cell the strongest of " + found.pool + " positions." : ".") +
        (n > 1 ? " A row per token of the word." : "");
    } else {
      $("heatnote").textContent = "The transcript has no words: nothing was said for the model to time.";
    }
    heat.dataset.word = String(state.word);
    heat.dataset.choice = choice;
    heat.dataset.drawn = String(++drawn.heat);
    // Every token.
    const rh = rowHeight(), canvas = $("tokens");
    const all = sized(canvas, rows * rh);
    all.ctx.clearRect(0, 0, all.width, rows * rh);
    paint(all.ctx, all.width, rh, found.values, found.cols, found.pool, 0, rows, colour);
    outline(all.ctx, all.width, rh, chosen, w);
    labels($("tokenlabels"), rh, chosen);
    canvas.dataset.drawn = String(++drawn.tokens);
  }

  let alignmentTickets = 0;
  async function drawAlignment() {
    const ticket = ++alignmentTickets, values = await alignment;
    if (ticket !== alignmentTickets) return;
    const a = data.alignment, rh = rowHeight(), canvas = $("alignment");
    const low = a.low, high = a.high > a.low ? a.high : a.low + 1, table = data.pathCmap;
    const { ctx, width } = sized(canvas, rows * rh);
    ctx.clearRect(0, 0, width, rows * rh);
    paint(ctx, width, rh, values, a.cols, 1, 0, a.rows, (v) => colourOf(table, (v - low) / (high - low)));
    // The path: a step per (token, position) it passes, through each cell's middle.
    const px = (j) => x((j + 0.5) * data.secondsPerPosition, width), py = (r) => (r + 0.5) * rh;
    for (const [style, line] of [["rgba(0,0,0,.85)", 4], ["#00e5ff", 2]]) {
      ctx.strokeStyle = style; ctx.lineWidth = line; ctx.beginPath();
      a.pathRows.forEach((r, k) => (k ? ctx.lineTo(px(a.pathColumns[k]), py(r)) : ctx.moveTo(px(a.pathColumns[k]), py(r))));
      ctx.stroke();
    }
    const w = data.words[state.word];
    outline(ctx, width, rh, w ? w.rows : null, w);
    labels($("pathlabels"), rh, w ? w.rows : null);
    colourbar($("pathbar"), table, number(a.high), number(a.low), "normalised weight");
    const names = data.alignmentHeads.map(([l, h]) => headName(l, h));
    $("pathnote").textContent = "The alignment heads' (" + (names.length <= 6 ? names.join(", ") : names.length + " heads") +
      ") cross-attention, as openai-whisper times words: a softmax over the clip, each moment normalised over the " +
      "tokens (so a bright cell is a token the moment stands out for), a median filter along time, the mean of the " +
      "heads. The cyan line is the cheapest monotone path through it (dynamic time warping); a token starts where " +
      "the path reaches its row, and a word at its first token.";
    canvas.dataset.drawn = String(++drawn.alignment);
  }

  // Tooltips over the two matrices, and a click there picks the word a row belongs to.
  function pointed(canvas, e) {
    const box = canvas.getBoundingClientRect(), rh = rowHeight();
    const row = Math.floor((e.clientY - box.top) / rh), t = ((e.clientX - box.left) / box.width) * span;
    return row >= 0 && row < rows && t >= 0 ? { row, t } : null;
  }
  const wordOfRow = (row) => data.words.findIndex((w) => row >= w.rows[0] && row < w.rows[1]);
  for (const [id, tip] of [["tokens", "tokenstip"], ["alignment", "pathtip"]]) {
    const canvas = $(id);
    canvas.addEventListener("mousemove", async (e) => {
      const at = pointed(canvas, e);
      if (!at) { $(tip).textContent = ""; return; }
      const j = Math.floor(at.t / data.secondsPerPosition);
      if (j >= data.positions) { $(tip).textContent = ""; return; }
      let value, what;
      if (id === "tokens") {
        const found = await weights(state.choice), col = Math.floor(j / found.pool);
        value = found.values[at.row * found.cols + col]; what = "attention weight";
      } else {
        value = (await alignment)[at.row * data.alignment.cols + j]; what = "normalised weight";
      }
      $(tip).textContent = "\u201c" + data.tokens[at.row] + "\u201d at " + fmt(j * data.secondsPerPosition) + " s: " +
        what + " " + number(value) + (wordOfRow(at.row) >= 0 ? " (click: its word)" : "");
    });
    canvas.addEventListener("mouseleave", () => { $(tip).textContent = ""; });
    canvas.addEventListener("click", (e) => {
      const at = pointed(canvas, e), i = at ? wordOfRow(at.row) : -1;
      if (i >= 0) choose(i);
    });
  }

  function choose(i) {
    if (i === state.word) return;
    state.word = i;
    buttons.forEach((b, k) => { b.button.classList.toggle("chosen", k === i); b.mark.classList.toggle("chosen", k === i); });
    draw();
  }
  let pending = null;
  function draw() {  // the last asked for wins: a hover over many words draws the one it stops on
    const job = Promise.all([drawHeat(), drawAlignment()]);
    pending = job;
    return job.then(() => { if (pending === job) document.body.dataset.drawn = String(drawn.heat); })
      .catch((err) => say("could not draw: " + err.message));
  }
  let resizing = false;
  window.addEventListener("resize", () => {
    if (resizing) return;
    resizing = true;
    requestAnimationFrame(() => { resizing = false; axes(); placeWords(); draw(); });
  });

  // A transcript's data (the page's own first; then each answer of a server): everything but the clip redrawn.
  function load(next) {
    data = Object.assign({}, next, clip);
    span = Math.max(data.duration, data.positions * data.secondsPerPosition, 1e-3);
    rows = data.tokens.length;
    cache.clear();
    alignment = data.alignment.rows ? attnvizDecode(data.alignment.values, data.alignment.encoding) : Promise.resolve(new Float32Array(0));
    if (stopAt !== null || state.playing >= 0) { audio.pause(); stopAt = null; }
    state.word = data.words.length ? 0 : -1;
    state.playing = -1;
    headChoices();
    wordBox.replaceChildren(...(wordHead ? [wordHead] : []));
    wordButtons();
    axes();
    placeWords();
    if (state.word >= 0) { buttons[state.word].button.classList.add("chosen"); buttons[state.word].mark.classList.add("chosen"); }
    return draw();
  }

  // --- a server's box: the transcript typed, teacher-forced (empty: the model's own) ---------------------------------
  const form = $("live");
  if (form && live) {
    const input = $("live-text"), status = $("live-status");
    input.value = live.text || "";
    let serial = 0;
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const mine = ++serial;
      status.textContent = "hearing the clip…";
      form.dataset.busy = "1";
      try {
        const reply = await fetch(live.endpoint, { method: "POST", headers: { "Content-Type": "application/json" },
                                                   body: JSON.stringify({ text: input.value }) });
        const body = await reply.json();
        if (mine !== serial) return;  // a later transcript is on its way
        if (!reply.ok) { status.textContent = body.error || reply.statusText; return; }
        status.textContent = "";
        await load(body);
        form.dataset.loaded = String(mine);
      } catch (err) {
        if (mine === serial) status.textContent = "the server did not answer: " + err.message;
      } finally {
        if (mine === serial) delete form.dataset.busy;
      }
    });
  }

  load(data);
  window.attnvizSound = { get data() { return data; }, state, choose, playWord, audio, load };
})();
