/* Attribution graph. The pruned graph: x = token position, y = layer (embeddings at the bottom, logits on top);
   an edge's width grows with |weight|, green raises its target and red lowers it. Hover a node or an edge for its
   numbers; click a feature node for its card (when the graph was drawn with cards) and its strongest inputs. */
(function () {
  "use strict";
  var V = window.InterpViews;

  V.renderers.attribution_graph = function (root, d) {
    var nPos = d.tokens.length, top = d.n_layers + 1;
    var W = Math.max(520, 70 * nPos + 90), H = Math.max(360, 18 * (top + 2) + 60);
    var m = { l: 70, r: 20, t: 16, b: 70 };
    function x(n, k) { return m.l + (n.pos + 0.5) * (W - m.l - m.r) / nPos + (k || 0); }
    function yOf(n) {
      var lev = n.kind === "embedding" ? -1 : n.kind === "logit" ? top : n.layer + (n.kind === "error" ? 0.45 : 0);
      return H - m.b - (lev + 1) * (H - m.t - m.b) / (top + 2);
    }
    // nodes sharing a (level, position) spread sideways
    var slots = {}, off = [];
    d.nodes.forEach(function (n, i) {
      var key = n.kind + ":" + n.layer + ":" + n.pos;
      slots[key] = (slots[key] || 0) + 1;
      off[i] = slots[key] - 1;
    });
    var seen = {};
    d.nodes.forEach(function (n, i) {
      var key = n.kind + ":" + n.layer + ":" + n.pos, c = slots[key];
      seen[i] = (off[i] - (c - 1) / 2) * Math.min(9, 40 / Math.max(c, 1));
    });
    var svg = V.svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, id: "graph-svg" });
    svg.appendChild(V.svg("rect", { x: 0, y: 0, width: W, height: H, fill: "#fff" }));
    var wmax = 1e-12;
    d.edges.forEach(function (e) { wmax = Math.max(wmax, Math.abs(e[2])); });
    var readout = V.el("div", "interp-readout");
    readout.id = "graph-readout";
    function nodeLines(n) {
      var what = n.kind === "feature" ? "feature " + n.feature + " at layer " + n.layer
        : n.kind === "error" ? "error node, layer " + n.layer
        : n.kind === "embedding" ? "embedding" : "logit " + V.quote(n.token);
      return [what + ", token " + n.pos + " " + V.quote(d.tokens[n.pos]),
              "activation " + V.fmt(n.activation) + "   influence " + V.fmt(n.influence)];
    }
    d.edges.forEach(function (e, k) {
      var s = d.nodes[e[0]], t = d.nodes[e[1]];
      var line = V.svg("line", { x1: x(s, seen[e[0]]), y1: yOf(s), x2: x(t, seen[e[1]]), y2: yOf(t),
        stroke: e[2] > 0 ? "#2a9d4a" : "#d33", "stroke-opacity": 0.55,
        "stroke-width": 0.6 + 4 * Math.abs(e[2]) / wmax });
      line.setAttribute("data-edge", k);
      line.addEventListener("mouseover", function (evt) {
        var lines = ["edge " + nodeLines(s)[0] + " \u2192 " + nodeLines(t)[0], "weight " + V.fmt(e[2])];
        readout.textContent = lines.join("   ");
        V.tip(evt, lines);
      });
      line.addEventListener("mouseleave", V.untip);
      svg.appendChild(line);
    });
    var colors = { feature: "#1f77b4", error: "#999", embedding: "#2ca02c", logit: "#d62728" };
    var panel = V.el("div", "");
    panel.id = "graph-panel";
    d.nodes.forEach(function (n, i) {
      var shape = n.kind === "error"
        ? V.svg("rect", { x: x(n, seen[i]) - 3, y: yOf(n) - 3, width: 6, height: 6, fill: colors[n.kind] })
        : V.svg("circle", { cx: x(n, seen[i]), cy: yOf(n), r: n.kind === "feature" ? 4 : 5, fill: colors[n.kind] });
      shape.setAttribute("data-node", i);
      shape.setAttribute("data-kind", n.kind);
      shape.style.cursor = "pointer";
      shape.addEventListener("mouseover", function (evt) {
        var lines = nodeLines(n);
        readout.textContent = lines.join("   ");
        V.tip(evt, lines);
      });
      shape.addEventListener("mouseleave", V.untip);
      shape.addEventListener("click", function () { showNode(i); });
      svg.appendChild(shape);
    });
    for (var p = 0; p < nPos; p++) {
      var lab = V.svg("text", { x: x({ pos: p }), y: H - m.b + 12, "text-anchor": "end",
        transform: "rotate(-45 " + x({ pos: p }) + " " + (H - m.b + 12) + ")" }, V.short(V.tokenText(d.tokens[p]), 14));
      svg.appendChild(lab);
    }
    [["embeddings", -1], ["logits", top]].forEach(function (a) {
      svg.appendChild(V.svg("text", { x: 4, y: yOf({ kind: a[1] < 0 ? "embedding" : "logit" }) + 3 }, a[0]));
    });
    for (var L = 0; L < d.n_layers; L += Math.max(1, Math.round(d.n_layers / 10))) {
      svg.appendChild(V.svg("text", { x: 4, y: yOf({ kind: "feature", layer: L }) + 3 }, "layer " + L));
    }
    function showNode(i) {
      var n = d.nodes[i];
      while (panel.firstChild) panel.removeChild(panel.firstChild);
      panel.appendChild(V.el("h3", "", nodeLines(n)[0]));
      var inputs = d.edges.filter(function (e) { return e[1] === i; })
        .sort(function (a, b) { return Math.abs(b[2]) - Math.abs(a[2]); }).slice(0, 8);
      var t = V.add(panel, V.el("table", "interp-table"));
      t.id = "graph-inputs";
      inputs.forEach(function (e) {
        var tr = V.add(t, V.el("tr"));
        V.add(tr, V.el("td", "", nodeLines(d.nodes[e[0]])[0]));
        V.add(tr, V.el("td", "", V.signed(e[2]))).setAttribute("data-value", String(e[2]));
      });
      var card = n.kind === "feature" ? d.cards[n.layer + "_" + n.feature] : null;
      if (card) {
        var box = V.add(panel, V.el("div", "card"));
        box.id = "graph-card";
        box.appendChild(V.el("div", "interp-note", card.summary));
        card.contexts.slice(0, 5).forEach(function (c, ci) {
          var vmax = 1e-12;
          c.acts.forEach(function (v) { if (v !== null) vmax = Math.max(vmax, Math.abs(v)); });
          V.contextBox(box, c, ci, "doc " + c.doc, function (chip, v) {
            chip.style.background = V.color("Oranges", v / vmax);
            chip.style.color = V.ink("Oranges", v / vmax);
            chip.setAttribute("data-value", String(v));
          });
        });
      } else if (n.kind === "feature") {
        panel.appendChild(V.el("p", "interp-note", "no card for this feature in this view (draw it with cards=)"));
      }
    }
    var row = V.add(root, V.el("div", "interp-row"));
    var left = V.add(row, V.el("div", ""));
    left.appendChild(svg);
    left.appendChild(readout);
    row.appendChild(panel);
    root.appendChild(V.el("p", "interp-note", "replacement score " + V.fmt(d.scores.replacement) + ", completeness " +
      V.fmt(d.scores.completeness) + ". " + d.note));
  };
})();
