/* Heatmap grids with labels and hover values: causal traces, patching grids, per-head scores. Each panel keeps
   the colour rule of the static plot it mirrors (colormap, vmin, vmax, which way up). */
(function () {
  "use strict";
  var V = window.InterpViews;
  V.renderers.grid = function (root, d) {
    if (d.note) root.appendChild(V.el("p", "interp-note", d.note));
    var row = V.add(root, V.el("div", "interp-row"));
    d.panels.forEach(function (p, pi) {
      var box = V.add(row, V.el("div", ""));
      box.appendChild(V.el("h2", "", p.title));
      var vals = p.values, extra = p.extra || {};
      var norm = V.scale(p.vmin, p.vmax);
      var hm = V.heatmap({ id: p.id || ("grid-" + pi), rows: p.rows, cols: p.cols, lowerOrigin: !!p.lower_origin,
        flatCols: !!p.flat_cols, cell: p.cell || [18, 16], rowTitle: p.row_name, colTitle: p.col_name,
        value: function (r, c) { var v = vals[r][c]; return v === null ? NaN : v; },
        color: function (v) { return V.color(p.cmap, norm(v)); },
        hover: function (r, c, v) {
          var lines = [p.row_name + " " + p.rows[r] + ", " + p.col_name + " " + p.cols[c], p.value_name + " " + (isNaN(v) ? "not computed" : V.fmt(v))];
          Object.keys(extra).forEach(function (k) { var x = extra[k][r][c]; lines.push(k + " " + (x === null ? "n/a" : V.fmt(x))); });
          return lines;
        } });
      box.appendChild(hm);
      hm.readout.id = (p.id || ("grid-" + pi)) + "-readout";
      box.appendChild(V.colorbar(p.cmap, p.vmin, p.vmax, p.value_name));
    });
  };
})();
