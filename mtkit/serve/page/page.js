// The page at /: translate a paragraph (its sentences split by POST /v1/split) through
// POST /v1/translate, list each sentence's translation and the chosen sentence's n-best
// hypotheses, and draw the chosen one's attention as a heatmap with its alignment links.
// A server of several models: a source (or auto) and a target chosen from /languages, the
// detected language and the pivot said, and each leg of a pivot's attention.
"use strict";

const $ = (id) => document.getElementById(id);
// results: one translation per sentence of the text; sentence: the one shown; chosen: its
// hypothesis shown; leg: a pivot's leg whose attention is drawn (-1: the last)
const state = { model: null, models: [], languages: [], results: null, sentence: 0,
                chosen: 0, leg: -1, token: sessionStorage.getItem("mtkit-token") };
// A source token counts as attended to from a target token (and the other way round) when it
// holds at least this share of the row's largest weight.
const SALIENT = 0.5;

function headers() {
  const h = { "Content-Type": "application/json" };
  if (state.token) h.Authorization = "Bearer " + state.token;
  return h;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function call(method, path, body) {
  const response = await fetch(path, { method, headers: headers(), body: body && JSON.stringify(body) });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (response.status === 401) {
    $("token-box").hidden = false;
    $("token").focus();
    throw new Error("This server needs a token: enter it above, then translate again.");
  }
  if (!response.ok) {
    throw new Error((data && data.error) || `${response.status} ${response.statusText}`);
  }
  return data;
}

async function loadModel() {
  try {
    const data = await call("GET", "/v1/models");
    state.models = data.models;
    state.model = data.models[0];
    $("model").textContent = data.models.map((m) =>
      `${m.name}: ${m.src_lang} → ${m.tgt_lang} · ${m.arch} · ${m.engine} on ${m.device}`).join("; ");
    state.languages = await call("GET", "/languages");
    const m = state.model;
    if (state.languages.length) {  // directions by language: a source (or auto) and a target
      const sources = state.languages.map((l) => [l.code, l.code]);
      fill($("from"), [["auto", "auto (detect)"], ...sources]);
      $("from").value = sources.length > 1 ? "auto" : sources[0][0];
      fillTargets();
      $("from-box").hidden = $("to-box").hidden = false;
    } else if (m.tags && m.tags.length) {  // one model, tags that name no language
      fill($("tag"), m.tags.map((t) => [t, t]));
      $("tag-box").hidden = false;
    }
    if (data.models.length === 1 && m.layers !== null) {
      fill($("layer"), [["", "alignment layer"], ...range(m.layers).map((l) => [String(l), String(l)])]);
      fill($("head"), [["", "mean"], ...range(m.heads).map((h) => [String(h), String(h)])]);
      $("layer-box").hidden = $("head-box").hidden = false;
    }
  } catch (e) {
    $("model").textContent = "";
    showError(e.message);
  }
}

// The targets reachable from the chosen source (from auto: every target there is).
function fillTargets() {
  const from = $("from").value, before = $("to").value;
  const targets = new Set();
  state.languages.forEach((l) => { if (from === "auto" || l.code === from) l.targets.forEach((t) => targets.add(t)); });
  fill($("to"), [...targets].sort().map((t) => [t, t]));
  if (targets.has(before)) $("to").value = before;
}

function range(n) { return Array.from({ length: n }, (_, i) => i); }

function fill(select, options) {
  select.replaceChildren(...options.map(([value, label]) => {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = label;
    return o;
  }));
}

// The text split into sentences by the server (each line break ends one), then every
// sentence translated in one request; the server widens the search to the hypotheses asked
// for (`widen`: its rule, routing.nbest_changes).
async function translate() {
  const text = $("source").value.trim();
  if (!text) { showError("Type a sentence first."); return; }
  if (!$("token-box").hidden && $("token").value) {
    state.token = $("token").value.trim();
    sessionStorage.setItem("mtkit-token", state.token);
  }
  $("go").disabled = true;
  showError("");
  try {
    const split = await call("POST", "/v1/split", { text });
    const body = { text: split.sentences, nbest: Number($("nbest").value), widen: true,
                   align: true, attention: true };
    if (!$("tag-box").hidden) body.tag = $("tag").value;
    if (!$("from-box").hidden) { body.source = $("from").value; body.target = $("to").value; }
    if ($("layer").value !== "") body.layer = Number($("layer").value);
    if ($("head").value !== "") body.head = Number($("head").value);
    const data = await call("POST", "/v1/translate", body);
    state.results = data.translations;
    state.sentence = 0;
    state.chosen = 0;
    state.leg = -1;
    $("token-box").hidden = true;
    render();
  } catch (e) {
    showError(e.message);
  } finally {
    $("go").disabled = false;
  }
}

function render() {
  const results = state.results;
  if (!results) return;
  const r = results[state.sentence];
  $("result").hidden = false;
  renderSentences(results);
  renderRoute(r);
  const list = $("nbest-list");
  list.replaceChildren(...r.candidates.map((c, k) => {
    const s = document.createElement("span");
    s.className = "score";
    s.textContent = `score ${c.score.toFixed(3)}`;
    return choice(c.text || "(empty)", s, k === state.chosen,
                  () => { state.chosen = k; state.leg = -1; render(); });
  }));
  // a pivot's first leg: its best hypothesis (what the second leg translated)
  const legs = r.legs || [];
  const leg = state.leg >= 0 && state.leg < legs.length - 1 ? legs[state.leg] : null;
  drawHeatmap(leg ? leg.candidates[0] : r.candidates[state.chosen]);
}

// A paragraph's sentences, each with its best translation: the one chosen is the one whose
// hypotheses and attention are shown.
function renderSentences(results) {
  $("sentences-box").hidden = results.length < 2;
  $("sentences").replaceChildren(...results.map((r, k) => {
    const s = document.createElement("span");
    s.className = "source";
    s.textContent = r.source;
    return choice(r.text || "(empty)", s, k === state.sentence,
                  () => { state.sentence = k; state.chosen = 0; state.leg = -1; render(); });
  }));
}

// A list item to click (or Enter) on: its text, a note beside it, marked when chosen.
function choice(text, note, chosen, choose) {
  const li = document.createElement("li");
  li.tabIndex = 0;
  li.className = chosen ? "chosen" : "";
  const t = document.createElement("span");
  t.className = "text";
  t.textContent = text;
  li.append(t, note);
  li.addEventListener("click", choose);
  li.addEventListener("keydown", (e) => { if (e.key === "Enter") choose(); });
  return li;
}

// The detected language and the pivot, and a button per leg choosing whose attention is drawn.
function renderRoute(r) {
  const detected = r.detected ? `detected: ${r.detected.language} (${r.detected.confidence.toFixed(1)}%)` : "";
  const legs = r.legs || [];
  const pivot = r.pivot ? `through ${r.pivot}: ${legs.map((l) => `${l.source_lang} → ${l.target_lang} (${l.model})`).join(", then ")}` : "";
  $("detected").textContent = detected;
  $("pivot").textContent = detected && pivot ? `· ${pivot}` : pivot;
  $("route").hidden = !detected && !pivot;
  $("leg-box").hidden = legs.length < 2;
  const chosen = state.leg >= 0 ? state.leg : legs.length - 1;
  $("legs").replaceChildren(...legs.map((l, k) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = k === chosen ? "chosen" : "";
    b.textContent = `${l.source_lang} → ${l.target_lang}`;
    b.addEventListener("click", () => { state.leg = k; render(); });
    return b;
  }));
}

function drawHeatmap(candidate) {
  const table = $("heatmap");
  const att = candidate.attention;
  if (!att) {
    table.replaceChildren();
    $("what").textContent = "(none for an empty translation)";
    return;
  }
  const m = att[$("level").value];
  $("what").textContent = `· ${att.what}`;
  const links = $("links").checked ? linkCells(candidate.alignment, m, att) : new Set();
  const head = document.createElement("tr");
  head.append(document.createElement("th"));
  m.source.forEach((label, i) => {
    const th = document.createElement("th");
    th.className = "col";
    th.dataset.col = i;
    const span = document.createElement("span");
    span.textContent = label;
    th.append(span);
    head.append(th);
  });
  const rows = m.target.map((label, j) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.className = "row";
    th.dataset.row = j;
    th.textContent = label;
    tr.append(th);
    m.weights[j].forEach((w, i) => {
      const td = document.createElement("td");
      td.className = "cell" + (links.has(`${j},${i}`) ? " link" : "");
      td.dataset.row = j;
      td.dataset.col = i;
      td.style.background = `rgba(37, 99, 235, ${Math.max(w, 0.02).toFixed(3)})`;
      td.textContent = w.toFixed(2);
      td.title = `${label} → ${m.source[i]}: ${w.toFixed(4)}`;
      tr.append(td);
    });
    return tr;
  });
  table.replaceChildren(head, ...rows);
  const wrap = $("heatmap-wrap");
  wrap.scrollLeft = 0;
  $("more-columns").hidden = wrap.scrollWidth <= wrap.clientWidth;
  table.onmouseover = (e) => highlight(e.target.closest("[data-row], [data-col]"), m);
  table.onmouseleave = () => highlight(null, m);
}

// Pharaoh links are between words (0-based source-target); at subword level a link covers
// every piece of its two words. The last row and column (EOS) carry no links.
function linkCells(alignment, m, att) {
  const cells = new Set();
  if (!alignment) return cells;
  const pairs = alignment.split(" ").filter(Boolean).map((l) => l.split("-").map(Number));
  if (m.level === "word") {
    pairs.forEach(([i, j]) => cells.add(`${j},${i}`));
    return cells;
  }
  const srcWord = wordOf(m.source), tgtWord = wordOf(m.target);
  pairs.forEach(([i, j]) => {
    tgtWord.forEach((tw, r) => srcWord.forEach((sw, c) => {
      if (tw === j && sw === i) cells.add(`${r},${c}`);
    }));
  });
  return cells;
}

// Which word each sentencepiece piece belongs to: a piece starting with ▁ starts a word.
function wordOf(pieces) {
  let word = -1;
  return pieces.map((p) => {
    if (p === "</s>") return -1;
    if (p.startsWith("\u2581") || word < 0) word += 1;
    return word;
  });
}

function highlight(element, m) {
  const table = $("heatmap");
  table.querySelectorAll(".hot, .dim").forEach((e) => e.classList.remove("hot", "dim"));
  if (!element) return;
  const row = element.dataset.row, col = element.dataset.col;
  const mark = (selector) => table.querySelectorAll(selector).forEach((e) => e.classList.add("hot"));
  if (row !== undefined && col !== undefined) {  // a cell: its two tokens
    mark(`th[data-row="${row}"], th[data-col="${col}"]`);
    element.classList.add("hot");
  } else if (row !== undefined) {  // a target token: the source tokens it attends to
    const weights = m.weights[row], top = Math.max(...weights);
    mark(`th[data-row="${row}"]`);
    weights.forEach((w, i) => { if (w >= SALIENT * top) mark(`th[data-col="${i}"], td[data-row="${row}"][data-col="${i}"]`); });
    dimOthers(table, (td) => td.dataset.row !== row);
  } else {  // a source token: the target tokens that attend to it most
    mark(`th[data-col="${col}"]`);
    m.weights.forEach((weights, j) => {
      if (weights[col] >= SALIENT * Math.max(...weights)) mark(`th[data-row="${j}"], td[data-row="${j}"][data-col="${col}"]`);
    });
    dimOthers(table, (td) => td.dataset.col !== col);
  }
}

function dimOthers(table, other) {
  table.querySelectorAll("td.cell").forEach((td) => { if (other(td)) td.classList.add("dim"); });
}

$("form").addEventListener("submit", (e) => { e.preventDefault(); translate(); });
$("source").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); translate(); }
});
$("level").addEventListener("change", render);
$("links").addEventListener("change", render);
$("from").addEventListener("change", fillTargets);
for (const id of ["tag", "layer", "head", "nbest", "from", "to"]) {
  $(id).addEventListener("change", () => { if (state.results) translate(); });
}
loadModel();
