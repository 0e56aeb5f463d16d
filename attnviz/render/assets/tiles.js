// attnviz's tiles: each head's matrix as a pyramid (attnviz/render/pyramid.py). Level 0 is the whole
// matrix max-pooled into one tile of at most 256 x 256 cells; each level below halves the pooling, down
// to one cell per query and key. A tile is stored as half floats ("f16", byte-shuffled) or as one byte,
// on a log scale ("log8") or linear ("lin8"), gzipped and base64-encoded; it is decoded only when drawn.
// One encoded tile's values, in the page's units (offset + stored · scale); the picture view's weights too.
// eslint-disable-next-line no-unused-vars
const attnvizDecode = (() => {
  "use strict";
  const HALF = new Float32Array(65536);  // every IEEE half float, once
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
    HALF[h] = sign * (exponent === 0 ? fraction * 2 ** -24 : exponent === 31 ? (fraction ? NaN : Infinity)
      : (1 + fraction / 1024) * 2 ** (exponent - 15));
  }
  const LOG8 = new Float32Array(256);  // 0, then 1e-6 … 1 evenly on a log scale
  for (let c = 1; c < 256; c++) LOG8[c] = 10 ** (-6 * (1 - (c - 1) / 254));
  function bytesOf(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  async function gunzip(bytes) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  async function decode(text, encoding, k = {}) {
    const raw = await gunzip(bytesOf(text));
    const scale = k.scale || 1, offset = k.offset || 0;
    let out;
    if (encoding === "lin8") {
      out = new Float32Array(raw.length);
      for (let i = 0; i < raw.length; i++) out[i] = offset + (raw[i] / 255) * scale;
    } else if (encoding === "f16") {
      const n = raw.length >> 1;
      out = new Float32Array(n);
      for (let i = 0; i < n; i++) out[i] = offset + HALF[raw[i] | (raw[n + i] << 8)] * scale;
    } else {
      out = new Float32Array(raw.length);
      for (let i = 0; i < raw.length; i++) out[i] = offset + LOG8[raw[i]] * scale;
    }
    return out;
  }
  decode.raw = (text) => gunzip(bytesOf(text));  // the bytes alone (the query-key view's planes)
  return decode;
})();

// eslint-disable-next-line no-unused-vars
function attnvizTiles(source) {
  "use strict";
  const cache = new Map();

  const decode = (text, k, encoding) => attnvizDecode(text, encoding, k);
  const geometry = (k, level) => k.levels[level];
  const tileShape = (k, level, x, y) => {
    const g = geometry(k, level), t = k.tile;
    return [Math.min(t, g.rows - y * t), Math.min(t, g.cols - x * t)];
  };
  // The levels a head can be drawn at: those the page holds, or every one where a server computes the rest.
  const served = (kind) => { const t = source().tiles; return t && t.kind === kind ? t : null; };
  const levelsOf = (kind, li, h) => (served(kind) ? source().kinds[kind].levels.length
    : source().kinds[kind].pyramids[li][h].tiles.length);
  // A tile from attnviz serve (/api/tile): float32 bytes, row by row. A failure is an empty tile saying why.
  async function fetched(kind, li, h, level, x, y, rows, cols) {
    const t = served(kind), k = source().kinds[kind];
    const query = new URLSearchParams({page: t.page, layer: k.layers[li], head: h, level, x, y});
    try {
      const reply = await fetch(`${t.endpoint}?${query}`);
      if (!reply.ok) throw new Error((await reply.json()).error || reply.statusText);
      return new Float32Array(await reply.arrayBuffer());
    } catch (err) {
      cache.delete(`${kind}/${li}/${h}/${level}/${x},${y}`);  // asked again next time
      return Object.assign(new Float32Array(rows * cols), {failed: String(err.message || err)});
    }
  }
  // A tile's values (Float32Array, rows x cols of the tile), or null when it is at a level the page does
  // not hold (and no server computes). A tile the page left out at a level it holds is all "centre" (the
  // masked half of causal attention).
  function tile(kind, li, h, level, x, y) {
    const k = source().kinds[kind];
    const levels = k.pyramids[li][h].tiles;
    if (level >= levelsOf(kind, li, h)) return Promise.resolve(null);
    const key = `${kind}/${li}/${h}/${level}/${x},${y}`;
    // Past the levels the page holds, or single cells it stores as a linear byte (to 1/255): from the server, exact.
    const approximate = served(kind) && k.levels[level].encoding === "lin8";
    if (!cache.has(key) && (level >= levels.length || approximate)) {
      const [rows, cols] = tileShape(k, level, x, y);
      cache.set(key, fetched(kind, li, h, level, x, y, rows, cols));
      for (const old of cache.keys()) {  // a long zoom fetches many tiles: the oldest go first
        if (cache.size <= 600) break;
        if (old !== key) cache.delete(old);
      }
    }
    if (!cache.has(key)) {
      const text = levels[level][x + "," + y];
      const [rows, cols] = tileShape(k, level, x, y);
      const absent = () => Object.assign(new Float32Array(rows * cols).fill((k.offset || 0) + (k.centre || 0) * (k.scale || 1)),
                                         {absent: true});
      cache.set(key, text ? decode(text, k, k.levels[level].encoding) : Promise.resolve(absent()));
    }
    return cache.get(key);
  }
  // One head's whole matrix at the leaves (Float32Array rows * cols), or null when the page holds a coarser level only.
  function matrix(kind, li, h) {
    const k = source().kinds[kind], leaf = k.levels.length - 1;
    if (k.pyramids[li][h].tiles.length <= leaf) return Promise.resolve(null);
    const key = `${kind}/${li}/${h}/whole`;
    if (!cache.has(key)) {
      cache.set(key, (async () => {
        const rows = k.rows.length, cols = k.cols.length, t = k.tile, out = new Float32Array(rows * cols);
        for (let y = 0; y * t < rows; y++) for (let x = 0; x * t < cols; x++) {
          const values = await tile(kind, li, h, leaf, x, y), [th, tw] = tileShape(k, leaf, x, y);
          for (let r = 0; r < th; r++) out.set(values.subarray(r * tw, (r + 1) * tw), (y * t + r) * cols + x * t);
        }
        return out;
      })());
    }
    return cache.get(key);
  }
  // One query's row at the leaves (Float32Array of cols) from the tiles of its band, without the whole
  // matrix; null where the page holds no single cells.
  async function row(kind, li, h, i) {
    const k = source().kinds[kind], leaf = k.levels.length - 1;
    if (k.pyramids[li][h].tiles.length <= leaf) return null;
    const t = k.tile, cols = k.cols.length, y = Math.floor(i / t), out = new Float32Array(cols);
    for (let x = 0; x * t < cols; x++) {
      const values = await tile(kind, li, h, leaf, x, y), [, tw] = tileShape(k, leaf, x, y);
      out.set(values.subarray((i - y * t) * tw, (i - y * t + 1) * tw), x * t);
    }
    return out;
  }
  // Each query's largest value (Float32Array of rows), for the per-row colour scale.
  function rowMax(kind, li, h) {
    const key = `${kind}/${li}/${h}/rowmax`;
    if (!cache.has(key)) cache.set(key, decode(source().kinds[kind].pyramids[li][h].rowMax, source().kinds[kind], "f16"));
    return cache.get(key);
  }
  // Each query's strongest keys where the page holds them (a long input): {keys, weights, k}, or null.
  function lines(kind, li, h) {
    const k = source().kinds[kind], stored = k.pyramids[li][h].lines;
    if (!stored || !k.lines) return Promise.resolve(null);
    const key = `${kind}/${li}/${h}/lines`;
    if (!cache.has(key)) {
      cache.set(key, (async () => {
        const planes = await attnvizDecode.raw(stored.keys), n = planes.length >> 2;
        const keys = new Uint32Array(n);
        for (let i = 0; i < n; i++)
          keys[i] = (planes[i] | (planes[n + i] << 8) | (planes[2 * n + i] << 16) | (planes[3 * n + i] << 24)) >>> 0;
        return {keys, weights: await decode(stored.weights, k, "f16"), k: k.lines};
      })());
    }
    return cache.get(key);
  }
  return {tile, matrix, row, rowMax, lines, tileShape, levelsOf, clear: () => cache.clear()};
}
