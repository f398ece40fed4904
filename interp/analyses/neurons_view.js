/* FFN neurons. "neurons": each neuron's top-k contexts with every token coloured by the neuron's activation
   there (orange positive, blue negative, scaled to the neuron's largest |activation|), its vocabulary projection
   beside them. "activations": one text, the tokens coloured by a chosen neuron. Hover a token for its value. */
(function () {
  "use strict";
  var V = window.InterpViews;
  function paint(chip, v, vmax) {
    var t = vmax > 0 ? Math.abs(v) / vmax : 0;
    var map = v >= 0 ? "Oranges" : "Blues";
    chip.style.background = V.color(map, t);
    chip.style.color = V.ink(map, t);
    chip.setAttribute("data-value", String(v));
  }
  function hoverStrip(strip, readout, describe) {
    strip.addEventListener("mouseover", function (evt) {
      var chip = evt.target.closest ? evt.target.closest(".tok") : null;
      if (!chip) return;
      var lines = describe(+chip.getAttribute("data-index"));
      readout.textContent = lines.join("   ");
      V.tip(evt, lines);
    });
    strip.addEventListener("mouseleave", V.untip);
  }
  function vocabTable(title, items, color) {
    var box = V.el("div", "");
    box.appendChild(V.el("div", "interp-note", title));
    var t = V.add(box, V.el("table", "interp-table"));
    var vmax = 1e-12;
    items.forEach(function (it) { vmax = Math.max(vmax, Math.abs(it[1])); });
    items.forEach(function (it) {
      var tr = V.add(t, V.el("tr"));
      tr.setAttribute("data-token", it[0]);
      V.add(tr, V.el("td", "", V.quote(it[0])));
      V.add(tr, V.el("td", "", V.fmt(it[1]))).setAttribute("data-value", String(it[1]));
      var bar = V.add(V.add(tr, V.el("td")), V.el("span", "bar-wrap")), fill = V.add(bar, V.el("span"));
      fill.style.width = Math.round(90 * Math.abs(it[1]) / vmax) + "px"; fill.style.background = color;
    });
    return box;
  }

  V.renderers.neurons = function (root, d) {
    if (d.note) root.appendChild(V.el("p", "interp-note", d.note));
    d.neurons.forEach(function (nr) {
      var card = V.add(root, V.el("div", "card"));
      card.id = "neuron-" + nr.neuron;
      card.setAttribute("data-neuron", nr.neuron);
      card.appendChild(V.el("h2", "", "L" + d.layer + "N" + nr.neuron + " \u2014 max activation " + V.fmt(nr.max)));
      var row = V.add(card, V.el("div", "interp-row"));
      var left = V.add(row, V.el("div", ""));
      left.style.maxWidth = "760px";
      var readout = V.el("div", "interp-readout");
      readout.id = "neuron-" + nr.neuron + "-readout";
      var vmax = 1e-12;
      nr.contexts.forEach(function (c) { c.acts.forEach(function (v) { if (v !== null) vmax = Math.max(vmax, Math.abs(v)); }); });
      nr.contexts.forEach(function (c, ci) {
        var strip = V.contextBox(left, c, ci, c.title, function (chip, v) { paint(chip, v, vmax); });
        hoverStrip(strip, readout, function (i) {
          var v = c.acts[i];
          return ["doc " + c.doc + " token " + c.positions[i] + " " + V.quote(c.tokens[i]), "activation " + (v === null ? "n/a" : V.fmt(v))];
        });
      });
      left.appendChild(readout);
      if (nr.promoted) {
        var right = V.add(row, V.el("div", "interp-row"));
        right.appendChild(vocabTable("promotes", nr.promoted, "#2ca02c"));
        right.appendChild(vocabTable("suppresses", nr.suppressed, "#d62728"));
      }
    });
    if (d.vocab_note) root.appendChild(V.el("p", "interp-note", "vocabulary projection: " + d.vocab_note));
  };

  V.renderers.activations = function (root, d) {
    var bar = V.add(root, V.el("div", ""));
    var strip = V.add(root, V.tokenStrip(d.tokens, { id: "act-tokens" }));
    var readout = V.add(root, V.el("div", "interp-readout"));
    readout.id = "act-readout";
    var sel = 0, buttons = [];
    function choose(j) {
      sel = j;
      buttons.forEach(function (b, i) { b.classList.toggle("sel", i === j); });
      var vals = d.acts[j], vmax = 1e-12, chips = strip.querySelectorAll(".tok");
      vals.forEach(function (v) { vmax = Math.max(vmax, Math.abs(v)); });
      vals.forEach(function (v, i) { paint(chips[i], v, vmax); });
      strip.setAttribute("data-neuron", d.neurons[j]);
    }
    d.neurons.forEach(function (n, j) {
      var b = V.add(bar, V.el("button", "interp", "L" + d.layer + "N" + n));
      b.setAttribute("data-neuron", n);
      b.addEventListener("click", function () { choose(j); });
      buttons.push(b);
    });
    hoverStrip(strip, readout, function (i) {
      return ["token " + i + " " + V.quote(d.tokens[i]), "L" + d.layer + "N" + d.neurons[sel] + " activation " + V.fmt(d.acts[sel][i])];
    });
    choose(0);
  };
})();
