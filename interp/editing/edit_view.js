/* A weight edit, before and after: completions side by side, then for the rewrite, paraphrase and neighbourhood
   prompts the probability of the new and the true target before and after (hover a bar for the value). */
(function () {
  "use strict";
  var V = window.InterpViews;
  var NAMES = { rewrite: "rewrite prompt (P(new) should win after)", paraphrase: "paraphrases (P(new) should win after)",
    neighborhood: "neighbourhood: other subjects (P(true) should still win)" };
  V.renderers.edit = function (root, d) {
    root.appendChild(V.el("h2", "", "Completions (greedy)"));
    var t = V.add(root, V.el("table", "interp-table"));
    t.id = "edit-completions";
    var h = V.add(t, V.el("tr"));
    ["prompt", "before the edit", "after the edit"].forEach(function (s) { V.add(h, V.el("th", "", s)); });
    d.completions.forEach(function (c) {
      var tr = V.add(t, V.el("tr"));
      V.add(tr, V.el("td", "", c.prompt));
      V.add(tr, V.el("td", "before", c.before));
      V.add(tr, V.el("td", "after", c.after));
    });
    var legend = "P(" + V.quote(d.target_new) + ") and P(" + V.quote(d.target_true) + "), before \u2192 after the edit at layer " + d.layer;
    root.appendChild(V.el("h2", "", legend));
    Object.keys(d.groups).forEach(function (g) {
      var rows = d.groups[g];
      if (!rows.length) return;
      var w = d.wins[g];
      var box = V.add(root, V.el("div", ""));
      box.id = "edit-" + g;
      box.appendChild(V.el("div", "interp-note", (NAMES[g] || g) + " (bars relative to this table's largest): " + w.before[0] + "/" + w.before[1] + " before \u2192 " + w.after[0] + "/" + w.after[1] + " after"));
      var table = V.add(box, V.el("table", "interp-table")), vmax = 1e-12;
      rows.forEach(function (r) { vmax = Math.max(vmax, r.before[0], r.after[0], r.before[1], r.after[1]); });
      var hr = V.add(table, V.el("tr"));
      ["prompt", "P(new) before", "P(new) after", "P(true) before", "P(true) after"].forEach(function (s) { V.add(hr, V.el("th", "", s)); });
      rows.forEach(function (r, i) {
        var tr = V.add(table, V.el("tr"));
        tr.setAttribute("data-index", i);
        V.add(tr, V.el("td", "", r.prompt));
        [[r.before[0], "#f4a582", "p-new-before"], [r.after[0], "#b2182b", "p-new-after"],
          [r.before[1], "#92c5de", "p-true-before"], [r.after[1], "#2166ac", "p-true-after"]].forEach(function (x) {
          var td = V.add(tr, V.el("td", x[2]));
          td.setAttribute("data-value", String(x[0]));
          td.appendChild(V.el("span", "mono", V.fmt(x[0], 3) + " "));
          var bar = V.add(td, V.el("span", "bar-wrap")), fill = V.add(bar, V.el("span"));
          fill.style.width = Math.round(90 * x[0] / vmax) + "px";  // relative to the table's largest
          fill.style.background = x[1];
        });
      });
    });
  };
})();
