// mindwatch report: draws the state heatmaps of the #mw-data block (heatmaps.py) on canvases.
// Data: {heatmaps: [{id, title, rows: [name], columns, steps: [[first, last]] per column,
// cells: base64, one byte per cell row by row (0..239 the colour scale, 250 no data, 251 zero
// or negative, 252 NaN, 253 +inf), scale: [log10 low, log10 high], labels: [low, high],
// marks: [{row, col, step, kind, message}] (an anomaly on that layer's cell),
// ticks: [{col, step, kind, message}] (an anomaly of the whole step), and from a job's page
// (job_charts_heatmap.py) note: what a cell's value is, group: ranks per row, worst: base64,
// a byte per cell, which rank of the row's group holds the cell's value (its offset)}]}.
(function () {
  "use strict";
  var TOP = 239, NO_DATA = 250, NOT_POSITIVE = 251, NAN = 252, INF = 253;
  var VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  var SPECIAL = {250: "#eceff2", 251: "#ffffff", 252: "#d62728", 253: "#000000"};
  var W = 1200, LABELS = 190, R = 16, TICKS = 12, AXIS = 22, MARK = "#ff00ff";

  function colourOf(code) {
    if (code > TOP) return SPECIAL[code] || SPECIAL[NO_DATA];
    var t = code / TOP * (VIRIDIS.length - 1), i = Math.min(Math.floor(t), VIRIDIS.length - 2);
    var f = t - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
    return "rgb(" + [0, 1, 2].map(function (k) {
      return Math.round(a[k] + (b[k] - a[k]) * f);
    }).join(",") + ")";
  }

  function html(tag, cls, text, parent) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;   // log text is never markup
    if (parent) parent.appendChild(node);
    return node;
  }

  function render(map, root) {
    var box = html("section", "panel heatmap", undefined, root);
    box.id = map.id;
    box.style.position = "relative";
    html("h3", "", map.title, box);
    var raw = atob(map.cells), rows = map.rows.length, cols = map.columns;
    var rowH = rows <= 30 ? 16 : rows <= 120 ? 10 : Math.max(2, Math.floor(1200 / rows));
    var cellW = (W - LABELS - R) / cols, H = TICKS + rows * rowH + AXIS;
    var canvas = html("canvas", "", undefined, box);
    canvas.width = W;
    canvas.height = H;
    canvas.style.width = "100%";
    canvas.setAttribute("data-rows", rows);
    canvas.setAttribute("data-columns", cols);
    var g = canvas.getContext("2d");
    for (var r = 0; r < rows; r++) {
      for (var c = 0; c < cols; c++) {
        g.fillStyle = colourOf(raw.charCodeAt(r * cols + c));
        // the next cell's left edge, rounded, so no seam shows between cells
        var x = Math.round(LABELS + c * cellW), x2 = Math.round(LABELS + (c + 1) * cellW);
        g.fillRect(x, TICKS + r * rowH, Math.max(1, x2 - x), rowH);
      }
    }
    g.fillStyle = "#1d2329";
    // rows under 9 px: 9 px labels on every few rows, not labels as small as a row
    var font = Math.max(9, Math.min(12, rowH));
    g.font = font + "px system-ui, sans-serif";
    g.textAlign = "right";
    g.textBaseline = "middle";
    var every = rowH >= 9 ? 1 : Math.ceil((font + 3) / rowH);   // labels 12+ px apart
    map.rows.forEach(function (name, i) {
      if (i % every === 0) g.fillText(name, LABELS - 6, TICKS + (i + 0.5) * rowH);
    });
    map.ticks.forEach(function (t) {                    // an anomaly of the whole step
      var x = LABELS + (t.col + 0.5) * cellW;
      g.fillStyle = "#d9534f";
      g.beginPath();
      g.moveTo(x - 4, 0);
      g.lineTo(x + 4, 0);
      g.lineTo(x, TICKS - 2);
      g.fill();
    });
    g.strokeStyle = MARK;
    g.lineWidth = 2;
    map.marks.forEach(function (m) {                    // an anomaly of one layer
      g.strokeRect(LABELS + m.col * cellW - 1, TICKS + m.row * rowH - 1,
                   Math.max(3, cellW) + 2, rowH + 2);
    });
    canvas.setAttribute("data-marks", map.marks.length);
    g.fillStyle = "#5b6670";
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "top";
    [0, Math.floor(cols / 2), cols - 1].forEach(function (c, i) {
      g.textAlign = ["left", "center", "right"][i];
      g.fillText("step " + map.steps[c][0], LABELS + (c + [0, 0.5, 1][i]) * cellW,
                 TICKS + rows * rowH + 5);
    });
    var legend = html("div", "legend", undefined, box);
    var bar = html("span", "scale", undefined, legend);
    bar.style.background = "linear-gradient(to right," + VIRIDIS.map(function (v) {
      return "rgb(" + v.join(",") + ")";
    }).join(",") + ")";
    legend.insertBefore(html("span", "", map.labels[0]), bar);
    html("span", "", map.labels[1], legend);
    [[NAN, "NaN"], [INF, "+inf"], [NOT_POSITIVE, "0"], [NO_DATA, "no data"]].forEach(
      function (s) {
        var item = html("span", "", undefined, legend), sw = html("i", "", undefined, item);
        sw.style.background = SPECIAL[s[0]];
        sw.style.height = "10px";
        item.appendChild(document.createTextNode(s[1]));
      });
    var mark = html("span", "", "\u25a1 anomaly of that row", legend);
    mark.style.color = MARK;
    hover(canvas, box, map, raw, rowH, cellW);
  }

  function valueText(map, code) {
    if (code === NO_DATA) return "no data";
    if (code === NOT_POSITIVE) return "0";
    if (code === NAN) return "NaN";
    if (code === INF) return "+inf";
    var lo = map.scale[0], hi = map.scale[1];
    return "~" + Math.pow(10, lo + code / TOP * (hi - lo)).toPrecision(3) + " (" +
      (map.note || "bin max") + ")";
  }

  function hover(canvas, box, map, raw, rowH, cellW) {
    var worst = map.worst ? atob(map.worst) : null;
    var tip = html("div", "tip", undefined, box);
    tip.style.display = "none";
    canvas.addEventListener("mousemove", function (ev) {
      var rect = canvas.getBoundingClientRect(), scale = W / rect.width;
      var x = (ev.clientX - rect.left) * scale, y = (ev.clientY - rect.top) * scale;
      var c = Math.floor((x - LABELS) / cellW), r = Math.floor((y - TICKS) / rowH);
      if (c < 0 || c >= map.columns || r < 0 || r >= map.rows.length) {
        tip.style.display = "none";
        return;
      }
      var steps = map.steps[c], text = [map.rows[r], "steps " + steps[0] +
        (steps[1] !== steps[0] ? "-" + steps[1] : ""),
        valueText(map, raw.charCodeAt(r * map.columns + c))];
      if (worst && raw.charCodeAt(r * map.columns + c) !== NO_DATA) {
        text.push("on rank " + (r * map.group + worst.charCodeAt(r * map.columns + c)));
      }
      map.marks.forEach(function (m) {
        if (m.row === r && m.col === c) text.push(m.kind + " at step " + m.step + ": " + m.message);
      });
      tip.textContent = text.join("\n");
      tip.style.display = "block";
      var bx = box.getBoundingClientRect();
      tip.style.left = Math.min(ev.clientX - bx.left + 12, bx.width - tip.offsetWidth - 4) + "px";
      tip.style.top = (ev.clientY - bx.top + 12) + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }

  var DATA = JSON.parse(document.getElementById("mw-data").textContent);
  var root = document.getElementById("heatmaps"), main = document.getElementById("report");
  var rendered = 0;
  (DATA.heatmaps || []).forEach(function (map) {
    try {
      render(map, root);
      rendered += 1;
    } catch (e) {   // one broken heatmap must not hide the others; say what broke
      document.getElementById("errors").textContent += "heatmap " + map.id + ": " +
        (e && e.stack ? e.stack : e) + "\n";
    }
  });
  main.setAttribute("data-heatmaps", String(rendered));
})();
