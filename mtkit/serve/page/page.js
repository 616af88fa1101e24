// The page at /: translate a sentence through POST /v1/translate, list the n-best
// hypotheses, and draw the chosen one's attention as a heatmap with its alignment links.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { model: null, result: null, chosen: 0, token: sessionStorage.getItem("mtkit-token") };
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
    const m = data.models[0];
    state.model = m;
    $("model").textContent = `${m.name}: ${m.src_lang} → ${m.tgt_lang} · ${m.arch} · ${m.engine} on ${m.device}`;
    if (m.tags && m.tags.length) {  // one model, several directions: the tag chooses
      fill($("tag"), m.tags.map((t) => [t, t]));
      $("tag-box").hidden = false;
    }
    if (m.layers !== null) {
      fill($("layer"), [["", "alignment layer"], ...range(m.layers).map((l) => [String(l), String(l)])]);
      fill($("head"), [["", "mean"], ...range(m.heads).map((h) => [String(h), String(h)])]);
      $("layer-box").hidden = $("head-box").hidden = false;
    }
  } catch (e) {
    $("model").textContent = "";
    showError(e.message);
  }
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

async function translate() {
  const text = $("source").value.trim();
  if (!text) { showError("Type a sentence first."); return; }
  if (!$("token-box").hidden && $("token").value) {
    state.token = $("token").value.trim();
    sessionStorage.setItem("mtkit-token", state.token);
  }
  const body = { text, nbest: Number($("nbest").value), align: true, attention: true };
  const d = state.model && state.model.decode;
  // the server's rule for LibreTranslate's alternatives (nbest_changes in app.py): greedy
  // search gives one hypothesis, a beam as many as its size
  if (d && body.nbest > 1) {
    if (d.method === "greedy") body.method = "beam";
    if (d.method !== "sample" && body.nbest > d.beam_size) body.beam_size = body.nbest;
  }
  if (!$("tag-box").hidden) body.tag = $("tag").value;
  if ($("layer").value !== "") body.layer = Number($("layer").value);
  if ($("head").value !== "") body.head = Number($("head").value);
  $("go").disabled = true;
  showError("");
  try {
    const data = await call("POST", "/v1/translate", body);
    state.result = data.translations[0];
    state.chosen = 0;
    $("token-box").hidden = true;
    render();
  } catch (e) {
    showError(e.message);
  } finally {
    $("go").disabled = false;
  }
}

function render() {
  const r = state.result;
  if (!r) return;
  $("result").hidden = false;
  const list = $("nbest-list");
  list.replaceChildren(...r.candidates.map((c, k) => {
    const li = document.createElement("li");
    li.tabIndex = 0;
    li.className = k === state.chosen ? "chosen" : "";
    const t = document.createElement("span");
    t.className = "text";
    t.textContent = c.text || "(empty)";
    const s = document.createElement("span");
    s.className = "score";
    s.textContent = `score ${c.score.toFixed(3)}`;
    li.append(t, s);
    const choose = () => { state.chosen = k; render(); };
    li.addEventListener("click", choose);
    li.addEventListener("keydown", (e) => { if (e.key === "Enter") choose(); });
    return li;
  }));
  drawHeatmap(r.candidates[state.chosen]);
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
for (const id of ["tag", "layer", "head", "nbest"]) {
  $(id).addEventListener("change", () => { if (state.result) translate(); });
}
loadModel();
