/* interp views: the pieces every view shares. Plain JavaScript, no dependencies, nothing fetched.
   Text from the data (tokens, prompts, labels) only ever enters the page through textContent or as an
   attribute value set from script, never as markup, so a token that looks like a closing script tag or an
   image with an onerror handler shows as those characters and runs nothing. */
(function () {
  "use strict";
  var V = window.InterpViews = { renderers: {} };

  // ------------------------------------------------------------------------------------------ elements
  V.el = function (tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  V.add = function (parent, child) { parent.appendChild(child); return child; };
  var SVGNS = "http://www.w3.org/2000/svg";
  V.svg = function (tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = String(text);
    return e;
  };

  // A token as a label: visible line breaks and tabs, '' for the empty string (as the static plots write them).
  V.tokenText = function (t) {
    if (t === null || t === undefined) return "";
    t = String(t);
    if (t === "") return "''";
    return t.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t");
  };
  // In a table cell a token of blanks (spaces, no-break spaces, zero-width) would look empty: one open box each.
  V.cellText = function (t) {
    t = V.tokenText(t);
    return /^[\s\u200b\u2060\ufeff]+$/.test(t) ? t.replace(/./g, "\u2423") : t;
  };
  V.short = function (s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; };
  V.quote = function (t) { return JSON.stringify(String(t)); };

  // Numbers as the hover shows them: 4 significant digits, small ones in exponent form.
  V.fmt = function (v, digits) {
    if (v === null || v === undefined || (typeof v === "number" && isNaN(v))) return "n/a";
    digits = digits || 4;
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(digits - 1);
    return Number(v.toPrecision(digits)).toString();
  };
  V.signed = function (v) { return (v > 0 ? "+" : "") + V.fmt(v); };

  // ------------------------------------------------------------------------------------------ data
  V.bytes = function (b64) {
    var bin = atob(b64), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  };
  // An array from Python's encode.u8 (codes) or a plain list (null -> NaN), as a Float64Array.
  V.decode = function (a) {
    var i, out;
    if (a && a.enc === "u8") {
      var codes = V.bytes(a.b64), step = (a.hi - a.lo) / 255;
      out = new Float64Array(codes.length);
      for (i = 0; i < codes.length; i++) out[i] = a.lo + codes[i] * step;
      return out;
    }
    var flat = [].concat.apply([], a.map(function (r) { return Array.isArray(r) ? r : [r]; }));
    out = new Float64Array(flat.length);
    for (i = 0; i < flat.length; i++) out[i] = flat[i] === null ? NaN : flat[i];
    return out;
  };
  V.range = function (vals) {
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < vals.length; i++) if (!isNaN(vals[i])) { lo = Math.min(lo, vals[i]); hi = Math.max(hi, vals[i]); }
    return lo === Infinity ? [0, 1] : [lo, hi];
  };

  // ------------------------------------------------------------------------------------------ colours
  // matplotlib's colormaps of the same names (ColorBrewer / viridis anchors, linear in between).
  var MAPS = {
    Blues: ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"],
    Reds: ["#fff5f0", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#a50f15", "#67000d"],
    Greens: ["#f7fcf5", "#e5f5e0", "#c7e9c0", "#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c", "#00441b"],
    Purples: ["#fcfbfd", "#efedf5", "#dadaeb", "#bcbddc", "#9e9ac8", "#807dba", "#6a51a3", "#54278f", "#3f007d"],
    Oranges: ["#fff5eb", "#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c", "#f16913", "#d94801", "#a63603", "#7f2704"],
    RdBu: ["#67001f", "#b2182b", "#d6604d", "#f4a582", "#fddbc7", "#f7f7f7", "#d1e5f0", "#92c5de", "#4393c3",
      "#2166ac", "#053061"],
    viridis: ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
      "#fde725"]
  };
  function rgb(hex) { return [parseInt(hex.slice(1, 3), 16), parseInt(hex.slice(3, 5), 16), parseInt(hex.slice(5, 7), 16)]; }
  var RGB = {};
  Object.keys(MAPS).forEach(function (k) { RGB[k] = MAPS[k].map(rgb); });
  RGB.RdBu_r = RGB.RdBu.slice().reverse();
  // [r, g, b] of colormap `name` at t in [0, 1] (clipped); NaN -> null.
  V.rgbAt = function (name, t) {
    if (t === null || isNaN(t)) return null;
    var m = RGB[name] || RGB.Blues, x = Math.max(0, Math.min(1, t)) * (m.length - 1), i = Math.min(Math.floor(x), m.length - 2), f = x - i;
    return [0, 1, 2].map(function (c) { return Math.round(m[i][c] + (m[i + 1][c] - m[i][c]) * f); });
  };
  V.color = function (name, t) {
    var c = V.rgbAt(name, t);
    return c ? "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")" : "#e9e9ec";
  };
  // matplotlib's Normalize: (v - vmin) / (vmax - vmin), a constant map when vmax == vmin.
  V.scale = function (vmin, vmax) {
    return function (v) { return vmax > vmin ? (v - vmin) / (vmax - vmin) : 0; };
  };
  V.ink = function (name, t) {
    var c = V.rgbAt(name, t);
    if (!c) return "#444";
    return (0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]) < 140 ? "#fff" : "#111";
  };
  V.colorbar = function (name, vmin, vmax, label) {
    var box = V.el("div", "interp-colorbar"), cv = document.createElement("canvas");
    cv.width = 160; cv.height = 1;
    var ctx = cv.getContext("2d"), img = ctx.createImageData(160, 1);
    for (var i = 0; i < 160; i++) {
      var c = V.rgbAt(name, i / 159);
      img.data[4 * i] = c[0]; img.data[4 * i + 1] = c[1]; img.data[4 * i + 2] = c[2]; img.data[4 * i + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    box.appendChild(V.el("span", "", V.fmt(vmin)));
    box.appendChild(cv);
    box.appendChild(V.el("span", "", V.fmt(vmax)));
    if (label) box.appendChild(V.el("span", "", label));
    return box;
  };

  // ------------------------------------------------------------------------------------------ tooltip
  var tip = null;
  V.tip = function (evt, lines) {
    if (!tip) { tip = V.el("div", "interp-tip"); document.body.appendChild(tip); }
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
    var x = evt.clientX + 14, y = evt.clientY + 12, w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth) x = Math.max(0, evt.clientX - w - 10);
    if (y + h > window.innerHeight) y = Math.max(0, evt.clientY - h - 10);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  };
  V.untip = function () { if (tip) tip.style.display = "none"; };

  // ------------------------------------------------------------------------------------------ heatmap
  // A DOM grid of cells (so each cell can be hovered, inspected and tested). o: {id, rows, cols (labels),
  // value(r, c), color(v) -> css, text(v) (optional cell text), ink(v), lowerOrigin (row 0 at the bottom),
  // cell: [w, h], rowTitle, colTitle, flatCols, hover(r, c, v) -> lines, readout (element), onClick(r, c)}
  V.heatmap = function (o) {
    var nr = o.rows.length, nc = o.cols.length, w = (o.cell || [22, 16])[0], h = (o.cell || [22, 16])[1];
    var wrap = V.el("div", "interp-heatmap");
    if (o.id) wrap.id = o.id;
    var grid = V.add(wrap, V.el("div", "interp-grid"));
    grid.style.gridTemplateColumns = "auto repeat(" + nc + ", " + w + "px)";
    var order = [];
    for (var i = 0; i < nr; i++) order.push(o.lowerOrigin ? nr - 1 - i : i);
    order.forEach(function (r) {
      var lab = V.add(grid, V.el("div", "lab rlab", o.rows[r]));
      lab.title = String(o.rows[r]);
      for (var c = 0; c < nc; c++) {
        var v = o.value(r, c), cell = V.add(grid, V.el("div", "cell"));
        cell.style.height = h + "px";
        cell.style.background = o.color(v);
        cell.setAttribute("data-row", r);
        cell.setAttribute("data-col", c);
        cell.setAttribute("data-value", isNaN(v) ? "nan" : String(v));
        if (o.text) {
          cell.textContent = o.text(v, r, c);
          cell.style.color = o.ink ? o.ink(v) : "#111";
          cell.style.fontSize = "10px"; cell.style.textAlign = "center"; cell.style.overflow = "hidden";
          cell.style.whiteSpace = "pre";
        }
      }
    });
    V.add(grid, V.el("div", "axis", o.rowTitle ? o.rowTitle + (o.lowerOrigin ? " \u2191" : " \u2193") + " / " + (o.colTitle || "") + " \u2192" : ""));
    for (var c2 = 0; c2 < nc; c2++) {
      var cl = V.add(grid, V.el("div", "lab clab" + (o.flatCols ? " flat" : ""), o.cols[c2]));
      cl.title = String(o.cols[c2]);
    }
    var readout = o.readout || V.add(wrap, V.el("div", "interp-readout"));
    var last = null;
    grid.addEventListener("mouseover", function (evt) {
      var cell = evt.target.closest ? evt.target.closest(".cell") : null;
      if (!cell) return;
      if (last) last.classList.remove("sel");
      last = cell; cell.classList.add("sel");
      var r = +cell.getAttribute("data-row"), c = +cell.getAttribute("data-col");
      var lines = o.hover(r, c, o.value(r, c));
      readout.textContent = lines.join("   ");
      V.tip(evt, lines);
    });
    grid.addEventListener("mouseleave", V.untip);
    if (o.onClick) grid.addEventListener("click", function (evt) {
      var cell = evt.target.closest ? evt.target.closest(".cell") : null;
      if (cell) o.onClick(+cell.getAttribute("data-row"), +cell.getAttribute("data-col"));
    });
    wrap.readout = readout;
    return wrap;
  };

  // ------------------------------------------------------------------------------------------ charts (SVG)
  function ticksLog(lo, hi) {
    var out = [], a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi)), step = Math.max(1, Math.ceil((b - a) / 6));
    for (var e = b; e >= a; e -= step) out.push(Math.pow(10, e));
    return out;
  }
  function ticksLin(lo, hi) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / 4)));
    if (span / step > 8) step *= 2;
    if (span / step > 8) step *= 2.5;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + 1e-12; v += step) out.push(+v.toPrecision(6));
    return out;
  }
  // o: {id, series: [{name, values, color, dash}], x (labels), log, invert, width, height, yLabel, xLabel,
  //     title, mark (x index to mark with a vertical line), hover(i, s) -> lines}
  V.lineChart = function (o) {
    var W = o.width || 520, H = o.height || 190, m = { l: 54, r: 10, t: 18, b: 34 };
    var svg = V.svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H });
    if (o.id) svg.setAttribute("id", o.id);
    var n = o.x.length, all = [];
    o.series.forEach(function (s) { s.values.forEach(function (v) { if (v !== null && !isNaN(v) && (!o.log || v > 0)) all.push(v); }); });
    var lo = all.length ? Math.min.apply(null, all) : 0, hi = all.length ? Math.max.apply(null, all) : 1;
    if (o.log) { lo = Math.pow(10, Math.floor(Math.log10(lo))); hi = Math.pow(10, Math.ceil(Math.log10(hi))); if (hi <= lo) hi = lo * 10; }
    else { if (o.zero !== false) { lo = Math.min(0, lo); hi = Math.max(0, hi); } if (hi === lo) hi = lo + 1; }
    function fy(v) {
      var t = o.log ? (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : (v - lo) / (hi - lo);
      if (o.invert) t = 1 - t;
      return m.t + (1 - t) * (H - m.t - m.b);
    }
    function fx(i) { return m.l + (n > 1 ? i / (n - 1) : 0.5) * (W - m.l - m.r); }
    svg.appendChild(V.svg("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, fill: "#fff", stroke: "#ccc" }));
    (o.log ? ticksLog(lo, hi) : ticksLin(lo, hi)).forEach(function (v) {
      var y = fy(v);
      svg.appendChild(V.svg("line", { x1: m.l, x2: W - m.r, y1: y, y2: y, stroke: "#eee" }));
      svg.appendChild(V.svg("text", { x: m.l - 4, y: y + 3, "text-anchor": "end" }, V.fmt(v, 3)));
    });
    var step = Math.max(1, Math.ceil(n / 16));
    for (var i = 0; i < n; i += step) svg.appendChild(V.svg("text", { x: fx(i), y: H - m.b + 12, "text-anchor": "middle" }, o.x[i]));
    if (o.mark !== undefined && o.mark !== null) svg.appendChild(V.svg("line", { x1: fx(o.mark), x2: fx(o.mark), y1: m.t, y2: H - m.b, stroke: "#999", "stroke-dasharray": "3,3" }));
    if (o.xLabel) svg.appendChild(V.svg("text", { x: (W + m.l) / 2, y: H - 4, "text-anchor": "middle" }, o.xLabel));
    if (o.yLabel) svg.appendChild(V.svg("text", { x: 12, y: (H - m.b + m.t) / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + (H - m.b + m.t) / 2 + ")" }, o.yLabel));
    if (o.title) svg.appendChild(V.svg("text", { x: m.l, y: 12 }, o.title));
    o.series.forEach(function (s, si) {
      var pts = [];
      s.values.forEach(function (v, j) { if (v !== null && !isNaN(v) && (!o.log || v > 0)) pts.push(fx(j) + "," + fy(v)); });
      svg.appendChild(V.svg("polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": 1.5, "stroke-dasharray": s.dash || "" }));
      s.values.forEach(function (v, j) {
        if (v === null || isNaN(v) || (o.log && v <= 0)) return;
        var c = V.svg("circle", { cx: fx(j), cy: fy(v), r: 2.8, fill: s.color, "class": "pt", "data-series": si, "data-x": j, "data-value": v });
        c.addEventListener("mouseenter", function (evt) { V.tip(evt, o.hover ? o.hover(j, si) : [s.name, o.x[j] + ": " + V.fmt(v)]); });
        c.addEventListener("mouseleave", V.untip);
        svg.appendChild(c);
      });
    });
    var lx = m.l + 6;
    o.series.forEach(function (s) {
      if (o.series.length < 2 && !o.legend) return;
      var name = V.short(s.name, 40);
      svg.appendChild(V.svg("line", { x1: lx, x2: lx + 14, y1: m.t + 10, y2: m.t + 10, stroke: s.color, "stroke-width": 2, "stroke-dasharray": s.dash || "" }));
      svg.appendChild(V.svg("text", { x: lx + 17, y: m.t + 13 }, name));
      lx += 24 + 6 * name.length;
    });
    return svg;
  };

  // o: {id, items: [{label, value, color, mark (a note drawn over the bar)}], width, height, yLabel, title,
  //     hover(i) -> lines}
  V.bars = function (o) {
    var n = o.items.length, W = o.width || Math.max(360, 70 + 13 * n), H = o.height || 230, m = { l: 50, r: 10, t: 22, b: 70 };
    var svg = V.svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H });
    if (o.id) svg.setAttribute("id", o.id);
    var vals = o.items.map(function (it) { return it.value; });
    var lo = Math.min(0, Math.min.apply(null, vals)), hi = Math.max(0, Math.max.apply(null, vals));
    if (hi === lo) hi = lo + 1;
    function fy(v) { return m.t + (hi - v) / (hi - lo) * (H - m.t - m.b); }
    var bw = (W - m.l - m.r) / n;
    ticksLin(lo, hi).forEach(function (v) {
      svg.appendChild(V.svg("line", { x1: m.l, x2: W - m.r, y1: fy(v), y2: fy(v), stroke: v === 0 ? "#888" : "#eee" }));
      svg.appendChild(V.svg("text", { x: m.l - 4, y: fy(v) + 3, "text-anchor": "end" }, V.fmt(v, 3)));
    });
    var step = Math.max(1, Math.ceil(11 / bw));  // a label every 11 px at least
    o.items.forEach(function (it, i) {
      var x = m.l + i * bw, y0 = fy(0), y1 = fy(it.value);
      var r = V.svg("rect", { x: x + bw * 0.1, y: Math.min(y0, y1), width: Math.max(1, bw * 0.8), height: Math.max(0.5, Math.abs(y1 - y0)),
        fill: it.color || "#888", "class": "bar", "data-index": i, "data-value": it.value });
      r.addEventListener("mouseenter", function (evt) {
        var lines = o.hover ? o.hover(i) : [it.label + ": " + V.signed(it.value)];
        if (o.readout) o.readout.textContent = lines.join("   ");
        V.tip(evt, lines);
      });
      r.addEventListener("mouseleave", V.untip);
      svg.appendChild(r);
      if (it.mark) {
        var my = Math.min(y0, y1) - 4;
        svg.appendChild(V.svg("text", { x: x + bw / 2, y: Math.max(10, my), "text-anchor": "start", fill: "#2a7a2a", "class": "mark" }, "\u25BC " + it.mark));
      }
      if (i % step === 0) {
        var tx = x + bw / 2, ty = H - m.b + 6;
        svg.appendChild(V.svg("text", { x: tx, y: ty, "text-anchor": "end", transform: "rotate(-60 " + tx + " " + ty + ")" }, V.short(it.label, 14)));
      }
    });
    if (o.yLabel) svg.appendChild(V.svg("text", { x: 12, y: (H - m.b + m.t) / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + (H - m.b + m.t) / 2 + ")" }, V.short(o.yLabel, 50)));
    if (o.title) svg.appendChild(V.svg("text", { x: m.l, y: 13 }, o.title));
    return svg;
  };

  // ------------------------------------------------------------------------------------------ tokens
  // A strip of token chips; each chip carries data-pos. opts.values: a number under each token.
  V.tokenStrip = function (tokens, opts) {
    opts = opts || {};
    var strip = V.el("div", "interp-tokens");
    if (opts.id) strip.id = opts.id;
    tokens.forEach(function (t, i) {
      var chip = V.add(strip, V.el("span", "tok"));
      chip.setAttribute("data-pos", opts.positions ? opts.positions[i] : i);
      chip.setAttribute("data-index", i);
      chip.appendChild(V.el("span", "t", V.tokenText(t)));
      chip.title = (opts.positions ? opts.positions[i] : i) + ": " + V.quote(t);
    });
    return strip;
  };
  // One top-k context of a corpus scan (c: value, pos, positions, tokens, acts): a titled box with its token strip,
  // each chip painted by paint(chip, value) (null values left blank) and the context's own token marked.
  V.contextBox = function (parent, c, ci, where, paint) {
    var box = V.add(parent, V.el("div", "ctx"));
    box.appendChild(V.el("div", "title", "#" + (ci + 1) + "  " + V.fmt(c.value) + "  \u00b7  " + where + ", token " + c.pos));
    var strip = V.add(box, V.tokenStrip(c.tokens, { positions: c.positions }));
    strip.setAttribute("data-context", ci);
    var chips = strip.querySelectorAll(".tok");
    c.acts.forEach(function (v, i) {
      if (v !== null) paint(chips[i], v);
      if (c.positions[i] === c.pos) chips[i].classList.add("mark");
    });
    return strip;
  };
  // Colour the chips of a strip by values (NaN: greyed), writing each value under its token.
  V.paintStrip = function (strip, values, cmap, vmax, fmt) {
    var chips = strip.querySelectorAll(".tok");
    for (var i = 0; i < chips.length; i++) {
      var v = values[i], chip = chips[i], lab = chip.querySelector(".v");
      if (!lab) lab = V.add(chip, V.el("span", "v"));
      if (v === null || isNaN(v)) {
        chip.classList.add("off"); chip.style.background = "#fff"; chip.style.color = "";
        chip.setAttribute("data-value", "nan"); lab.textContent = "\u2013";
        continue;
      }
      chip.classList.remove("off");
      var t = vmax > 0 ? v / vmax : 0;
      chip.style.background = V.color(cmap, t);
      chip.style.color = V.ink(cmap, t);
      chip.setAttribute("data-value", String(v));
      lab.textContent = (fmt || V.fmt)(v);
    }
  };

  // ------------------------------------------------------------------------------------------ page
  V.header = function (root, d) {
    root.appendChild(V.el("h1", "", d.title || ""));
    if (d.summary) root.appendChild(V.el("p", "interp-summary", d.summary));
  };
  // Size the notebook's iframe to the page (a same-origin srcdoc frame; nothing to do in a plain tab).
  V.fit = function () {
    var f = null;
    try { f = window.frameElement; } catch (e) { f = null; }
    if (f) f.style.height = (document.documentElement.scrollHeight + 6) + "px";
  };
  V.boot = function () {
    var root = document.getElementById("interp-root");
    try {
      var d = JSON.parse(document.getElementById("interp-data").textContent);
      var draw = V.renderers[root.getAttribute("data-kind")];
      if (!draw) throw new Error("no renderer for view kind " + root.getAttribute("data-kind"));
      V.header(root, d);
      draw(root, d);
      root.setAttribute("data-ready", "1");
    } catch (err) {
      root.appendChild(V.el("pre", "interp-error", "this view failed to draw: " + err));
      root.setAttribute("data-ready", "error");
      console.error(err);
    }
    V.fit();
    if (window.ResizeObserver) new ResizeObserver(V.fit).observe(document.body);
  };
})();
