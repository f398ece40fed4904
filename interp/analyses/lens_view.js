/* Logit lens (or tuned lens): lens rows (embedding at the bottom, as in the static plot) x positions, each cell the
   top-1 token coloured by its probability; hover a cell for its top-k and the targets; click a position for the
   targets' probability and rank curves over the rows. */
(function () {
  "use strict";
  var V = window.InterpViews;
  V.renderers.lens = function (root, d) {
    var L1 = d.labels.length, P = d.positions.length, K = d.k;
    var ids = d.top_ids, probs = d.top_probs;
    function top(r, c, j) { var o = (r * P + c) * K + j; return { id: ids[o], tok: d.vocab[String(ids[o])], p: probs[o] }; }
    function tgt(t, key, r, c) { return d.targets[t][key][r * P + c]; }
    var selPos = P - 1;

    root.appendChild(V.el("h2", "", "Top-1 token of each residual (rows) at each position (columns) \u2014 hover a cell, click a position"));
    var row = V.add(root, V.el("div", "interp-row"));
    var left = V.add(row, V.el("div", ""));
    var table = V.add(left, V.el("table", "interp-table lens"));
    table.id = "lens-table";
    var thead = V.add(V.add(table, V.el("thead")), V.el("tr"));
    V.add(thead, V.el("th", "", "residual \\ input"));
    var heads = [];
    d.positions.forEach(function (p, c) {
      var th = V.add(thead, V.el("th", "pos", V.tokenText(d.tokens[p])));
      th.title = "position " + p + ": " + V.quote(d.tokens[p]) + " (the lens predicts the next token)";
      th.setAttribute("data-col", c);
      th.addEventListener("click", function () { choose(c); });
      heads.push(th);
    });
    var body = V.add(table, V.el("tbody"));
    for (var r = L1 - 1; r >= 0; r--) {
      var tr = V.add(body, V.el("tr"));
      V.add(tr, V.el("th", "", d.labels[r] + " (" + r + ")"));
      for (var c = 0; c < P; c++) {
        var t1 = top(r, c, 0), td = V.add(tr, V.el("td", "c", V.short(V.cellText(t1.tok), 8)));
        td.style.background = V.color("Blues", t1.p);
        td.style.color = t1.p > 0.6 ? "#fff" : "#111";  // the static plot's rule
        td.setAttribute("data-row", r);
        td.setAttribute("data-col", c);
        td.setAttribute("data-value", String(t1.p));
      }
    }
    left.appendChild(V.colorbar("Blues", 0, 1, "top-1 probability"));

    var side = V.add(row, V.el("div", "interp-panel"));
    side.id = "lens-detail";
    side.style.minWidth = "260px";
    var dTitle = V.add(side, V.el("div", "mono", "hover a cell"));
    dTitle.id = "lens-detail-title";
    var list = V.add(side, V.el("table", "interp-table"));
    list.id = "lens-topk";
    var tList = V.add(side, V.el("table", "interp-table"));
    tList.id = "lens-targets";
    tList.style.marginTop = "6px";

    var last = null;
    body.addEventListener("mouseover", function (evt) {
      var td = evt.target.closest ? evt.target.closest("td.c") : null;
      if (!td) return;
      if (last) last.classList.remove("sel");
      last = td; td.classList.add("sel");
      detail(+td.getAttribute("data-row"), +td.getAttribute("data-col"));
    });
    body.addEventListener("click", function (evt) {
      var td = evt.target.closest ? evt.target.closest("td.c") : null;
      if (td) choose(+td.getAttribute("data-col"));
    });

    function detail(r, c) {
      var p = d.positions[c];
      dTitle.textContent = "row " + r + " (" + d.labels[r] + "), position " + p + " " + V.quote(d.tokens[p]);
      dTitle.setAttribute("data-row", r);
      dTitle.setAttribute("data-col", c);
      list.textContent = "";
      var h = V.add(list, V.el("tr"));
      ["#", "token", "prob", ""].forEach(function (s) { V.add(h, V.el("th", "", s)); });
      for (var j = 0; j < K; j++) {
        var t = top(r, c, j), tr = V.add(list, V.el("tr"));
        tr.setAttribute("data-rank", j);
        tr.setAttribute("data-token-id", t.id);
        V.add(tr, V.el("td", "", String(j + 1)));
        V.add(tr, V.el("td", "tokcell", V.quote(t.tok)));
        var pc = V.add(tr, V.el("td", "prob", V.fmt(t.p, 4)));
        pc.setAttribute("data-value", String(t.p));
        var bar = V.add(V.add(tr, V.el("td")), V.el("span", "bar-wrap"));
        var fill = V.add(bar, V.el("span"));
        fill.style.width = Math.round(90 * t.p) + "px"; fill.style.background = V.color("Blues", 0.75);
      }
      tList.textContent = "";
      if (!d.targets.length) return;
      var h2 = V.add(tList, V.el("tr"));
      ["target", "prob", "rank"].forEach(function (s) { V.add(h2, V.el("th", "", s)); });
      d.targets.forEach(function (tg, ti) {
        var tr = V.add(tList, V.el("tr"));
        tr.setAttribute("data-target", ti);
        V.add(tr, V.el("td", "", V.quote(tg.scored)));
        V.add(tr, V.el("td", "prob", V.fmt(tgt(ti, "prob", r, c)))).setAttribute("data-value", String(tgt(ti, "prob", r, c)));
        V.add(tr, V.el("td", "rank", String(tgt(ti, "rank", r, c)))).setAttribute("data-value", String(tgt(ti, "rank", r, c)));
      });
    }

    var curves = V.add(root, V.el("div", ""));
    curves.id = "lens-curves";
    var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
    function choose(c) {
      selPos = c;
      heads.forEach(function (th, j) { th.classList.toggle("sel", j === c); });
      curves.textContent = "";
      if (!d.targets.length) { curves.appendChild(V.el("p", "interp-note", "no targets: pass targets=[...] for probability / rank curves")); V.fit(); return; }
      var p = d.positions[c], xs = d.labels.map(function (_, i) { return String(i); });
      var head = V.add(curves, V.el("h2", "", "Targets at position " + p + " " + V.quote(d.tokens[p]) + " by lens row"));
      head.id = "lens-curve-title";
      head.setAttribute("data-col", c);
      function series(key, plus) {
        return d.targets.map(function (tg, ti) {
          var vals = [];
          for (var r = 0; r < L1; r++) { var v = tgt(ti, key, r, c); vals.push(v === null ? NaN : v + plus); }
          return { name: tg.name, values: vals, color: COLORS[ti % COLORS.length] };
        });
      }
      function hover(key) {
        return function (j, si) {
          var tg = d.targets[si];
          return [tg.name, "row " + j + " (" + d.labels[j] + ")", "prob " + V.fmt(tgt(si, "prob", j, c)) + ", rank " + tgt(si, "rank", j, c)];
        };
      }
      var box = V.add(curves, V.el("div", "interp-row"));
      box.appendChild(V.lineChart({ id: "lens-prob-chart", series: series("prob", 0), x: xs, log: true, yLabel: "probability", xLabel: "residual after i blocks (0 = embedding)", hover: hover("prob"), legend: true }));
      box.appendChild(V.lineChart({ id: "lens-rank-chart", series: series("rank", 1), x: xs, log: true, invert: true, yLabel: "rank + 1 (1 = top-1)", xLabel: "residual after i blocks (0 = embedding)", hover: hover("rank"), legend: true }));
      V.fit();
    }
    choose(selPos);
    detail(L1 - 1, P - 1);
  };
})();
