/* Sparse features. "feature_card": one feature's top contexts, every token coloured by the feature's activation
   there (hover for the value), its activation histogram and density, and the tokens its decoder promotes and
   suppresses. "feature_tokens": a text's tokens; click a token for its active features in every dictionary,
   hover a token for the chosen dictionary's top feature there. */
(function () {
  "use strict";
  var V = window.InterpViews;
  function vocabTable(title, items, color) {
    var box = V.el("div", "");
    box.appendChild(V.el("div", "interp-note", title));
    var t = V.add(box, V.el("table", "interp-table"));
    items.forEach(function (it) {
      var tr = V.add(t, V.el("tr"));
      tr.setAttribute("data-token", it[0]);
      V.add(tr, V.el("td", "", V.quote(it[0])));
      V.add(tr, V.el("td", "", V.fmt(it[1]))).setAttribute("data-value", String(it[1]));
      tr.style.color = color;
    });
    return box;
  }

  V.renderers.feature_card = function (root, d) {
    var card = V.add(root, V.el("div", "card"));
    card.id = "feature-card";
    card.appendChild(V.el("h2", "", "feature " + d.feature + " at " + d.site + " \u2014 density " + V.fmt(100 * d.density) + "% of " + d.n_tokens + " tokens"));
    var row = V.add(card, V.el("div", "interp-row"));
    var left = V.add(row, V.el("div", ""));
    left.style.maxWidth = "760px";
    var readout = V.el("div", "interp-readout");
    readout.id = "feature-readout";
    var vmax = 1e-12;
    d.contexts.forEach(function (c) { c.acts.forEach(function (v) { vmax = Math.max(vmax, Math.abs(v)); }); });
    d.contexts.forEach(function (c, ci) {
      var strip = V.contextBox(left, c, ci, "doc " + c.doc, function (chip, v) {
        chip.style.background = V.color("Oranges", v / vmax);
        chip.style.color = V.ink("Oranges", v / vmax);
        chip.setAttribute("data-value", String(v));
      });
      strip.addEventListener("mouseover", function (evt) {
        var chip = evt.target.closest ? evt.target.closest(".tok") : null;
        if (!chip) return;
        var i = +chip.getAttribute("data-index");
        var lines = ["doc " + c.doc + " token " + c.positions[i] + " " + V.quote(c.tokens[i]), "activation " + V.fmt(c.acts[i])];
        readout.textContent = lines.join("   ");
        V.tip(evt, lines);
      });
      strip.addEventListener("mouseleave", V.untip);
    });
    left.appendChild(readout);
    var right = V.add(row, V.el("div", ""));
    var items = d.hist.map(function (n, i) { return { label: d.bin_labels[i], value: n, color: "#1f77b4" }; });
    var hr = V.el("div", "interp-readout");
    hr.id = "hist-readout";
    right.appendChild(V.bars({ id: "feature-hist", items: items, readout: hr, title: "activation histogram (log bins)",
      yLabel: "tokens", hover: function (i) { return ["activation " + d.bin_labels[i], d.hist[i] + " tokens"]; } }));
    right.appendChild(hr);
    var vocab = V.add(right, V.el("div", "interp-row"));
    vocab.appendChild(vocabTable("promotes", d.promoted, "#2a7a2a"));
    vocab.appendChild(vocabTable("suppresses", d.suppressed, "#b22222"));
    root.appendChild(V.el("p", "interp-note", d.note));
  };

  V.renderers.feature_tokens = function (root, d) {
    var bar = V.add(root, V.el("div", ""));
    var strip = V.add(root, V.tokenStrip(d.tokens, { id: "feature-tokens" }));
    var readout = V.add(root, V.el("div", "interp-readout"));
    readout.id = "feature-tokens-readout";
    var table = V.add(root, V.el("table", "interp-table"));
    table.id = "feature-list";
    var sel = 0, buttons = [];
    function topAt(j, i) { var a = d.active[j][i]; return a.length ? a[0] : null; }
    function choose(j) {
      sel = j;
      buttons.forEach(function (b, k) { b.classList.toggle("sel", k === j); });
      var vals = d.tokens.map(function (_, i) { var t = topAt(j, i); return t ? t[1] : 0; });
      var vmax = 1e-12;
      vals.forEach(function (v) { vmax = Math.max(vmax, v); });
      V.paintStrip(strip, vals, "Oranges", vmax);
      strip.setAttribute("data-dictionary", d.keys[j]);
    }
    function list(i) {
      while (table.firstChild) table.removeChild(table.firstChild);
      var head = V.add(table, V.el("tr"));
      ["dictionary", "features at token " + i + " " + V.quote(d.tokens[i])].forEach(function (h) { V.add(head, V.el("th", "", h)); });
      d.keys.forEach(function (k, j) {
        var tr = V.add(table, V.el("tr"));
        tr.setAttribute("data-dictionary", k);
        V.add(tr, V.el("td", "", String(k)));
        V.add(tr, V.el("td", "", d.active[j][i].map(function (fv) { return fv[0] + " (" + V.fmt(fv[1]) + ")"; }).join(", ")));
      });
    }
    d.keys.forEach(function (k, j) {
      var b = V.add(bar, V.el("button", "interp", String(k)));
      b.setAttribute("data-dictionary", k);
      b.addEventListener("click", function () { choose(j); });
      buttons.push(b);
    });
    strip.addEventListener("mouseover", function (evt) {
      var chip = evt.target.closest ? evt.target.closest(".tok") : null;
      if (!chip) return;
      var i = +chip.getAttribute("data-index"), t = topAt(sel, i);
      var lines = ["token " + i + " " + V.quote(d.tokens[i]), d.keys[sel] + ": " + (t ? "feature " + t[0] + " activation " + V.fmt(t[1]) : "no active feature")];
      readout.textContent = lines.join("   ");
      V.tip(evt, lines);
    });
    strip.addEventListener("mouseleave", V.untip);
    strip.addEventListener("click", function (evt) {
      var chip = evt.target.closest ? evt.target.closest(".tok") : null;
      if (chip) list(+chip.getAttribute("data-index"));
    });
    choose(0);
    list(0);
  };
})();
