/* Direct logit attribution: a layer x head heatmap of each head's direct contribution (diverging, centred at 0,
   layer 0 at the bottom, as the static plot draws it) and bars of every layer-level component, the input
   embedding's direct path marked. */
(function () {
  "use strict";
  var V = window.InterpViews;
  var KIND = { embed: "#2ca02c", pos_embed: "#bcbd22", attn: "#1f77b4", head: "#1f77b4", attn_bias: "#17becf",
    mlp: "#ff7f0e", remainder: "#7f7f7f" };
  V.renderers.dla = function (root, d) {
    var L = d.heads.length, H = L ? d.heads[0].length : 0, lim = 1e-9;
    d.heads.forEach(function (r) { r.forEach(function (v) { lim = Math.max(lim, Math.abs(v)); }); });
    var e = d.embedding;
    var note = V.add(root, V.el("p", "interp-note", "value " + V.fmt(d.value) + " = sum of parts " + V.fmt(d.total) +
      " (incl. remainder " + V.signed(d.remainder) + "); embedding direct path " + V.signed(e.contribution) +
      " = " + V.fmt(100 * e.fraction_of_value, 3) + "% of the value, " + V.fmt(100 * e.abs_share, 3) +
      "% of |attribution|, rank " + e.rank_by_abs + " of " + e.n_components));
    note.id = "dla-embedding";
    var row = V.add(root, V.el("div", "interp-row"));
    var left = V.add(row, V.el("div", ""));
    left.appendChild(V.el("h2", "", "Per head (hover)"));
    var rows = [], cols = [];
    for (var l = 0; l < L; l++) rows.push("L" + l);
    for (var h = 0; h < H; h++) cols.push("H" + h);
    var norm = V.scale(-lim, lim);
    var hm = V.heatmap({ id: "dla-heads", rows: rows, cols: cols, lowerOrigin: true, flatCols: true, cell: [24, 14],
      rowTitle: "layer", colTitle: "head",
      value: function (r, c) { return d.heads[r][c]; },
      color: function (v) { return V.color("RdBu", norm(v)); },
      hover: function (r, c, v) { return ["L" + r + "H" + c, "direct contribution " + V.signed(v), V.fmt(100 * v / d.value, 3) + "% of " + V.fmt(d.value)]; } });
    left.appendChild(hm);
    hm.readout.id = "dla-readout";
    left.appendChild(V.colorbar("RdBu", -lim, lim, "direct contribution"));
    var right = V.add(row, V.el("div", ""));
    right.appendChild(V.el("h2", "", "Per layer-level component (hover)"));
    var out = V.el("div", "interp-readout");
    out.id = "dla-bar-readout";
    var items = d.parts.map(function (p) {
      return { label: p.label, value: p.value, color: KIND[p.kind] || "#888",
        mark: p.kind === "embed" ? "embedding direct path" : null };
    });
    right.appendChild(V.bars({ id: "dla-bars", items: items, readout: out, yLabel: "direct contribution to " + d.what,
      hover: function (i) { var p = d.parts[i]; return [p.label + " (" + p.kind + ")", "direct contribution " + V.signed(p.value)]; } }));
    right.appendChild(out);
  };
})();
