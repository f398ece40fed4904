/* The fallback view: a result's table, sortable by clicking a column header. */
(function () {
  "use strict";
  var V = window.InterpViews;
  V.renderers.table = function (root, d) {
    var table = V.add(root, V.el("table", "interp-table"));
    table.id = "table";
    var head = V.add(V.add(table, V.el("thead")), V.el("tr")), body = V.add(table, V.el("tbody"));
    var rows = d.rows.slice(), dir = {};
    function draw() {
      body.textContent = "";
      rows.forEach(function (r) {
        var tr = V.add(body, V.el("tr"));
        r.forEach(function (v) {
          var td = V.add(tr, V.el("td", "", typeof v === "number" ? V.fmt(v, 6) : (v === null ? "" : String(v))));
          if (typeof v === "number") td.setAttribute("data-value", String(v));
        });
      });
    }
    d.columns.forEach(function (c, j) {
      var th = V.add(head, V.el("th", "", c));
      th.addEventListener("click", function () {
        dir[j] = -(dir[j] || -1);
        rows.sort(function (a, b) {
          var x = a[j], y = b[j];
          if (x === y) return 0;
          if (x === null) return 1;
          if (y === null) return -1;
          return (x < y ? -1 : 1) * dir[j];
        });
        draw();
      });
    });
    draw();
    if (d.n_rows > d.rows.length) root.appendChild(V.el("p", "interp-note", "first " + d.rows.length + " of " + d.n_rows + " rows; .to_frame() has them all"));
  };
})();
