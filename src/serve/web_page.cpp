#include "serve/web_page.h"

namespace tfm::serve {

const std::string& web_page_html() {
  static const std::string html = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tfm serve</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:"DejaVu Sans",sans-serif;margin:24px;color:#222;max-width:1200px}
textarea{width:100%;font-size:15px;padding:6px;box-sizing:border-box}
button,select,input{font-size:14px;margin:6px 6px 6px 0}
#out{font-size:18px;margin:10px 0;min-height:1.4em}
#panels canvas{margin:4px;border:1px solid #ddd}
.err{color:#b00}
small{color:#666}
</style></head><body>
<h2 id="title">tfm serve</h2>
<div id="modelinfo"><small>loading model info...</small></div>
<textarea id="text" rows="4"></textarea><br>
<label id="pairctl" hidden><small>languages</small> <select id="pair"></select></label>
<button id="go">Run</button>
<span id="attnctl" hidden>layer <select id="layer"></select>
<select id="kind"><option value="cross">decoder cross-attention</option>
<option value="encoder_self">encoder self-attention</option></select></span>
<label id="beamctl" hidden><small>beam size</small> <input id="beam" type="number" min="1" value="1" size="3"></label>
<label><small>API key</small> <input id="key" type="password" size="12"></label>
<div id="out"></div>
<small id="attnnote"></small>
<div id="panels"></div>
<script>
"use strict";
const $ = id => document.getElementById(id);
let info = null, last = null;
function headers() {
  const h = {"Content-Type": "application/json"};
  const k = $("key").value || localStorage.getItem("tfm_key") || "";
  if (k) h["Authorization"] = "Bearer " + k;
  return h;
}
async function call(path, body) {
  const r = await fetch(path, {method: body ? "POST" : "GET", headers: headers(),
                                body: body ? JSON.stringify(body) : undefined});
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
  return j;
}
// matplotlib "Reds", as the PNG heatmaps use.
const REDS = [[255,245,240],[254,224,210],[252,187,161],[252,146,114],[251,106,74],[239,59,44],[203,24,29],
              [165,15,21],[103,0,13]];
function reds(t) {
  t = Math.min(1, Math.max(0, t || 0)) * 8; const i = Math.min(7, Math.floor(t)), f = t - i;
  const c = REDS[i].map((v, k) => Math.round(v * (1 - f) + REDS[i + 1][k] * f));
  return "rgb(" + c.join(",") + ")";
}
// One heatmap: m[q][k], query labels down the left, key labels (rotated) along the bottom, a title, a colour bar.
function heatmap(title, m, qlabels, klabels, vmax, showValues) {
  const cell = showValues ? 44 : 26, font = "12px DejaVu Sans, sans-serif";
  const cv = document.createElement("canvas"), g = cv.getContext("2d");
  g.font = font;
  const qw = Math.max(...qlabels.map(s => g.measureText(s).width)) + 10;
  const kh = Math.max(...klabels.map(s => g.measureText(s).width)) + 10;
  const W = qw + klabels.length * cell + 60, H = 24 + qlabels.length * cell + kh;
  cv.width = W; cv.height = H; cv.title = title; cv.dataset.title = title;
  cv.dataset.rows = qlabels.length; cv.dataset.cols = klabels.length;
  g.fillStyle = "#fff"; g.fillRect(0, 0, W, H);
  for (let q = 0; q < m.length; ++q) for (let k = 0; k < m[q].length; ++k) {
    g.fillStyle = reds(m[q][k] / vmax); g.fillRect(qw + k * cell, 24 + q * cell, cell, cell);
    if (showValues) { g.fillStyle = m[q][k] / vmax > 0.6 ? "#fff" : "#000"; g.font = "11px sans-serif";
      g.textAlign = "center"; g.fillText(m[q][k].toFixed(2), qw + (k + .5) * cell, 24 + (q + .6) * cell); }
  }
  g.font = font; g.fillStyle = "#111"; g.textBaseline = "middle";
  g.textAlign = "right"; qlabels.forEach((s, q) => g.fillText(s, qw - 4, 24 + (q + .5) * cell));
  klabels.forEach((s, k) => { g.save(); g.translate(qw + (k + .5) * cell, 24 + m.length * cell + 4);
    g.rotate(-Math.PI / 2); g.textAlign = "right"; g.fillText(s, 0, 0); g.restore(); });
  g.font = "bold 13px DejaVu Sans, sans-serif"; g.textAlign = "center";
  g.fillText(title, qw + klabels.length * cell / 2, 11);
  const bx = qw + klabels.length * cell + 10, bh = m.length * cell;   // colour bar
  for (let y = 0; y < bh; ++y) { g.fillStyle = reds(1 - y / bh); g.fillRect(bx, 24 + y, 12, 1); }
  g.font = font; g.fillStyle = "#111"; g.textAlign = "left";
  g.fillText(vmax.toFixed(2), bx + 15, 28); g.fillText("0", bx + 15, 20 + bh);
  return cv;
}
function drawAttention() {
  const p = $("panels"); p.innerHTML = "";
  if (!last) return;
  const layer = +$("layer").value, kind = $("kind").value;
  const mats = last[kind][layer];
  const q = kind === "cross" ? last.target_tokens : last.source_tokens;
  let vmax = 0; mats.forEach(m => m.forEach(r => r.forEach(v => vmax = Math.max(vmax, v))));
  mats.forEach((m, h) => p.appendChild(heatmap("Head " + (h + 1), m, q, last.source_tokens, vmax || 1, false)));
  p.dataset.panels = mats.length; p.dataset.layer = layer; p.dataset.kind = kind;
}
async function run() {
  $("out").className = ""; $("out").textContent = "...";
  try {
    if (info.model_kind === "translation") {
      const q = $("text").value.trim(), beam = Math.max(1, Math.round(+$("beam").value || 1));
      const pairs = info.pairs || [{source: info.source_lang, target: info.target_lang}], pair = +$("pair").value || 0;
      if (pair > 0) {  // /attention translates with the first pair; the others go through /translate
        last = null; $("panels").innerHTML = ""; $("attnnote").textContent = "";
        const t = await call("/translate", {q: q, source: pairs[pair].source, target: pairs[pair].target,
                                            beam_size: beam});
        $("out").textContent = t.translatedText; $("out").dataset.done = "1"; $("out").dataset.beam = beam;
        $("panels").innerHTML = "<small>no attention is drawn for this language pair: it is drawn for the first " +
                                "one</small>";
        return;
      }
      last = await call("/attention", {q: q, beam_size: beam});
      $("out").textContent = last.translatedText; $("out").dataset.done = "1"; $("out").dataset.beam = beam;
      $("attnnote").textContent = beam > 1 ? "attention of the beam's best hypothesis (beam size " + beam + ")"
                                           : "attention of greedy decoding (beam size 1)";
      drawAttention();
    } else {
      const s = $("text").value.split("\n").map(x => x.trim()).filter(x => x);
      const e = await call("/embed", {inputs: s, normalize: true});
      const sim = e.map(a => e.map(b => a.reduce((t, v, i) => t + v * b[i], 0)));
      $("out").textContent = s.length + " sentences, cosine similarity:"; $("out").dataset.done = "1";
      const p = $("panels"); p.innerHTML = "";
      const labels = s.map(x => x.length > 24 ? x.slice(0, 23) + "\u2026" : x);
      p.appendChild(heatmap("Cosine similarity", sim.map(r => r.map(v => Math.max(0, v))), labels, labels, 1, true));
      p.dataset.panels = 1; p.dataset.size = s.length;
    }
  } catch (err) { $("out").className = "err"; $("out").textContent = err.message; $("out").dataset.done = "error"; }
}
async function start() {
  $("key").value = localStorage.getItem("tfm_key") || "";
  $("key").onchange = () => { localStorage.setItem("tfm_key", $("key").value); if (!info) location.reload(); };
  try { info = await call("/info"); } catch (err) {
    $("modelinfo").className = "err"; $("modelinfo").textContent = err.message + " (type the API key below)"; return;
  }
  const tr = info.model_kind === "translation";
  $("title").textContent = tr ? "Translate " + info.source_lang + " \u2192 " + info.target_lang
                              : "Sentence similarity";
  $("modelinfo").innerHTML = "<small>" + info.model_id + " (" + info.model_type + ")" +
      // a sentence-transformers folder's pooling is its pipeline ("Transformer(...) -> Pooling(mean) -> Normalize")
      (tr ? "" : ", " + info.pooling + (info.pooling.includes("->") ? "" : " pooling") + "; one sentence a line") +
      "</small>";
  $("text").value = tr ? "i lost ." : "the cat sat on the mat\na dog sat on the mat\nthe sun and the moon";
  if (tr) {
    $("attnctl").hidden = false;
    for (let l = 0; l < (info.num_layers || 1); ++l) $("layer").add(new Option("" + (l + 1), l));
    $("layer").value = (info.num_layers || 1) - 1;
    $("layer").onchange = drawAttention; $("kind").onchange = drawAttention;
    $("beamctl").hidden = false;
    (info.pairs || []).forEach((p, i) => $("pair").add(new Option(p.source + " \u2192 " + p.target, i)));
    $("pairctl").hidden = (info.pairs || []).length < 2;
    $("pair").onchange = () => { const p = info.pairs[+$("pair").value];
                                 $("title").textContent = "Translate " + p.source + " \u2192 " + p.target; };
    if (info.max_beam_size) $("beam").max = info.max_beam_size;
  }
  $("go").onclick = run;
  const params = new URLSearchParams(location.search), q = params.get("q");
  if (tr && params.get("beam")) $("beam").value = params.get("beam");
  if (q !== null) { $("text").value = q.replace(/\|/g, "\n"); await run(); }
}
start();
</script></body></html>
)HTML";
  return html;
}

}  // namespace tfm::serve
