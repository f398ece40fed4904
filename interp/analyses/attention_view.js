/* Attention: every head of the model as a thumbnail (layer x head, KV groups marked); a click opens the head's
   token view, where hovering a token shows where it attends to (its row) and who attends to it (its column),
   with the values. Patterns arrive as 8-bit codes of the causal lower triangle, head after head. */
(function () {
  "use strict";
  var V = window.InterpViews;
  V.renderers.attention = function (root, d) {
    var n = d.tokens.length, H = d.heads.length, L = d.layers.length, tri = n * (n + 1) / 2;
    var codes = V.bytes(d.patterns.b64), step = 1 / 255;
    function at(li, h, q, k) { return k > q ? 0 : codes[(li * H + h) * tri + q * (q + 1) / 2 + k] * step; }
    var sel = { li: 0, h: 0, tok: null };

    // ---------------------------------------------------------------- the whole model
    root.appendChild(V.el("h2", "", "All heads (" + L + " layers \u00d7 " + H + " heads; " + d.n_kv_heads +
      " KV groups) \u2014 click a head, then hover its tokens"));
    var layout = V.add(root, V.el("div", "interp-row"));
    var grid = V.add(layout, V.el("div", "attn-heads"));
    grid.id = "attn-heads";
    var thumb = L > 12 ? 30 : 44;  // a 30-layer model still fits beside the head's view
    grid.style.gridTemplateColumns = "auto repeat(" + H + ", auto)";
    // KV-group bands over the head labels: one per run of heads that read the same KV head.
    V.add(grid, V.el("div", "llab", ""));
    for (var a = 0; a < H;) {
      var b = a;
      while (b + 1 < H && d.kv_groups[b + 1] === d.kv_groups[a]) b++;
      var band = V.add(grid, V.el("div", "group g" + (d.kv_groups[a] % 2), "KV " + d.kv_groups[a] +
        (b > a ? " (H" + d.heads[a] + "\u2013H" + d.heads[b] + ")" : "")));
      band.style.gridColumn = "span " + (b - a + 1);
      band.setAttribute("data-group", d.kv_groups[a]);
      a = b + 1;
    }
    V.add(grid, V.el("div", "llab", ""));
    for (var h0 = 0; h0 < H; h0++) V.add(grid, V.el("div", "hlab", "H" + d.heads[h0]));
    var thumbs = [];
    function paint(canvas, li, h) {
      var ctx = canvas.getContext("2d"), img = ctx.createImageData(n, n);
      for (var q = 0; q < n; q++) for (var k = 0; k < n; k++) {
        var c = V.rgbAt("Blues", at(li, h, q, k)), o = 4 * (q * n + k);
        img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
    }
    function stat(name, li, h) { return d.stats && d.stats[name] ? d.stats[name][li][h] : null; }
    for (var li = 0; li < L; li++) {
      var win = d.windows ? d.windows[li] : null;
      V.add(grid, V.el("div", "llab", "L" + d.layers[li] + (win ? " \u00b7 w" + win : ""))).title =
        win ? "sliding-window layer: each query sees " + win + " positions" : "";
      thumbs.push([]);
      for (var h = 0; h < H; h++) {
        var cv = V.add(grid, document.createElement("canvas"));
        cv.width = n; cv.height = n;
        cv.style.width = thumb + "px"; cv.style.height = thumb + "px";
        cv.className = "thumb" + (h > 0 && d.kv_groups[h] !== d.kv_groups[h - 1] ? " gstart" : "");
        cv.setAttribute("data-layer", d.layers[li]);
        cv.setAttribute("data-head", d.heads[h]);
        cv.setAttribute("data-hindex", h);
        cv.setAttribute("data-index", li);
        cv.title = "L" + d.layers[li] + "H" + d.heads[h] + " (KV " + d.kv_groups[h] + ")" +
          (d.stats ? "\nentropy " + V.fmt(stat("entropy", li, h), 3) + ", first " + V.fmt(stat("first_token", li, h), 3) +
            ", prev " + V.fmt(stat("prev_token", li, h), 3) : "");
        paint(cv, li, h);
        thumbs[li].push(cv);
      }
    }
    grid.addEventListener("click", function (evt) {
      var t = evt.target;
      if (t.classList && t.classList.contains("thumb")) select(+t.getAttribute("data-index"), +t.getAttribute("data-hindex"));
    });

    // ---------------------------------------------------------------- one head
    var detail = V.add(layout, V.el("div", "attn-detail"));
    detail.style.maxWidth = "760px";
    detail.id = "attn-detail";
    var title = V.add(detail, V.el("h2", ""));
    title.id = "attn-title";
    var stats = V.add(detail, V.el("div", "interp-note"));
    stats.id = "attn-stats";
    detail.appendChild(V.el("div", "interp-note", "Hover a token: blue = where it attends to (its row), " +
      "orange = how much each later token attends to it (its column). Values within \u00b1" + V.fmt(step / 2, 2) +
      " (8-bit)."));
    var main = V.add(detail, V.tokenStrip(d.tokens, { id: "attn-tokens", positions: d.positions }));
    var readTo = V.add(detail, V.el("div", "interp-readout"));
    readTo.id = "attn-to-label";
    var stripTo = V.add(detail, V.tokenStrip(d.tokens, { id: "attn-to", positions: d.positions }));
    var readFrom = V.add(detail, V.el("div", "interp-readout"));
    readFrom.id = "attn-from-label";
    var stripFrom = V.add(detail, V.tokenStrip(d.tokens, { id: "attn-from", positions: d.positions }));
    var big = V.add(detail, document.createElement("canvas"));
    big.className = "attn-big";
    big.id = "attn-canvas";
    big.width = n; big.height = n;
    var px = Math.max(3, Math.min(14, Math.floor(420 / n)));
    big.style.width = (n * px) + "px"; big.style.height = (n * px) + "px";
    var cellOut = V.add(detail, V.el("div", "interp-readout"));
    cellOut.id = "attn-cell";

    function hover(i) {
      sel.tok = i;
      var chips = main.querySelectorAll(".tok");
      for (var j = 0; j < chips.length; j++) chips[j].classList.toggle("sel", j === i);
      var row = [], col = [];
      for (var k = 0; k < n; k++) {
        row.push(k > i ? NaN : at(sel.li, sel.h, i, k));
        col.push(k < i ? NaN : at(sel.li, sel.h, k, i));
      }
      readTo.textContent = "token " + d.positions[i] + " " + V.quote(d.tokens[i]) + " attends to (row " + d.positions[i] + "):";
      readFrom.textContent = "attention paid to token " + d.positions[i] + " " + V.quote(d.tokens[i]) + " by each later token (column " + d.positions[i] + "):";
      V.paintStrip(stripTo, row, "Blues", 1, function (v) { return v.toFixed(3); });
      V.paintStrip(stripFrom, col, "Oranges", 1, function (v) { return v.toFixed(3); });
      for (var j2 = 0; j2 < chips.length; j2++) {
        chips[j2].style.background = j2 <= i ? V.color("Blues", row[j2]) : "#fff";
        chips[j2].style.color = j2 <= i ? V.ink("Blues", row[j2]) : "";
        chips[j2].classList.toggle("off", j2 > i);
      }
    }
    main.addEventListener("mouseover", function (evt) {
      var chip = evt.target.closest ? evt.target.closest(".tok") : null;
      if (chip) hover(+chip.getAttribute("data-index"));
    });
    big.addEventListener("mousemove", function (evt) {
      var r = big.getBoundingClientRect(), k = Math.floor((evt.clientX - r.left) / r.width * n), q = Math.floor((evt.clientY - r.top) / r.height * n);
      if (q < 0 || k < 0 || q >= n || k >= n) return;
      var lines = ["query " + d.positions[q] + " " + V.quote(d.tokens[q]), "key   " + d.positions[k] + " " + V.quote(d.tokens[k]),
        "weight " + at(sel.li, sel.h, q, k).toFixed(3)];
      cellOut.textContent = lines.join("   ");
      V.tip(evt, lines);
    });
    big.addEventListener("mouseleave", V.untip);

    function select(li, h) {
      thumbs[sel.li][sel.h].classList.remove("sel");
      sel.li = li; sel.h = h;
      thumbs[li][h].classList.add("sel");
      title.textContent = "layer " + d.layers[li] + ", head " + d.heads[h] + " (KV group " + d.kv_groups[h] + " of " + d.n_kv_heads + ")" +
        (d.windows && d.windows[li] ? ", sliding window " + d.windows[li] : "");
      title.setAttribute("data-layer", d.layers[li]);
      title.setAttribute("data-head", d.heads[h]);
      stats.textContent = d.stats ? "entropy " + V.fmt(stat("entropy", li, h), 3) + " nats \u00b7 first token " +
        V.fmt(stat("first_token", li, h), 3) + " \u00b7 previous token " + V.fmt(stat("prev_token", li, h), 3) +
        " \u00b7 mean offset " + V.fmt(stat("mean_offset", li, h), 3) : "";
      paint(big, li, h);
      hover(sel.tok === null ? n - 1 : sel.tok);
      V.fit();
    }
    select(0, 0);
  };
})();
