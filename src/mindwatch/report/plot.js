// mindwatch report: draws the panels described in the #mw-data JSON block as inline SVG.
// Vanilla JS, no dependencies and no network, so the report opens anywhere, offline.
// Data format (built by mindwatch/report/html.py): {panels: [{id, title, hlines: [{y, label}],
// markers (bool), axis: null (no data) or {log, x: [x0, x1], y: [y0, y1] (log10 units on a
// log axis), x_ticks: [[x, label]], y_ticks: [[y, label]]}, lines: [{label, rank, x: [],
// y: [], text: [], faint, dash, spread}]}], anomalies: [{step, rank, kind, message}]}.
// A page of several runs (compare.py) adds runs: [{label, colour}], and to each line and
// anomaly `run` (an index into runs); its lines carry their `colour`. Its anomalies are
// marked in their run's colour, with a dot on each curve of their run and rank.
// A job's page (job_charts.py) sets `band` on a panel: its lines with band "hi" and "lo" (the
// max and min across ranks, each downsampled on its own) are the edges of a filled band,
// drawn under every line; the other lines carry their `colour` and `dash`.
// Non-finite values arrive as the strings "NaN", "Infinity", "-Infinity" (the JSON stays
// strict). Every number shown as text (ticks, tooltips) comes formatted from Python.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                 "#17becf", "#bcbd22"];
  var SPREAD = {min: "#2ca02c", median: "#1f77b4", max: "#ff7f0e"};
  var DASHES = ["", "6 3", "2 2"];
  var W = 1200, H = 250, L = 72, R = 16, T = 10, B = 28;

  function num(v) {
    if (typeof v === "number") return v;
    if (v === "NaN") return NaN;
    if (v === "Infinity") return Infinity;
    if (v === "-Infinity") return -Infinity;
    return null;
  }

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, cls, text, parent) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;   // textContent: log text is never markup
    if (parent) parent.appendChild(node);
    return node;
  }

  function colour(line) {
    if (line.colour) return line.colour;
    return line.spread ? SPREAD[line.spread] : PALETTE[line.rank % PALETTE.length];
  }

  function bisect(xs, x) {   // index of the point nearest to x in a sorted array
    var lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) { var mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid; else hi = mid; }
    return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
  }

  function renderPanel(panel, root) {
    var box = html("section", "panel", undefined, root);
    box.id = "panel-" + panel.id;
    box.style.position = "relative";
    html("h3", "", panel.title, box);
    var axis = panel.axis;
    if (!axis) {
      html("p", "nodata", DATA.runs ? "no data in these runs" : "no data in this run", box);
      return;
    }
    var lines = panel.lines.map(function (line) {
      return {src: line, x: line.x, y: line.y.map(num)};
    });
    var legend = html("div", "legend", undefined, box);
    lines.forEach(function (l) {
      var item = html("span", "", undefined, legend);
      var sw = html("i", "", undefined, item);
      sw.style.background = colour(l.src);
      sw.style.opacity = l.src.faint ? 0.4 : 1;
      item.appendChild(document.createTextNode(l.src.label));
    });
    var hlines = panel.hlines || [];
    var log = axis.log, x0 = axis.x[0], x1 = axis.x[1], y0 = axis.y[0], y1 = axis.y[1];
    function px(x) { return L + (x - x0) / (x1 - x0) * (W - L - R); }
    function py(v) { return H - B - ((log ? Math.log10(v) : v) - y0) / (y1 - y0) * (H - T - B); }
    var svg = el("svg", {viewBox: "0 0 " + W + " " + H, role: "img"}, box);
    el("title", {}, svg).textContent = panel.title;
    axis.y_ticks.forEach(function (tick) {
      var y = py(tick[0]);
      el("line", {x1: L, x2: W - R, y1: y, y2: y, stroke: "#eceff2"}, svg);
      el("text", {x: L - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#5b6670"},
         svg).textContent = tick[1];
    });
    axis.x_ticks.forEach(function (tick) {
      var x = px(tick[0]);
      el("line", {x1: x, x2: x, y1: H - B, y2: H - B + 4, stroke: "#5b6670"}, svg);
      el("text", {x: x, y: H - B + 16, "text-anchor": "middle", "font-size": 11,
                  fill: "#5b6670"}, svg).textContent = tick[1];
    });
    el("text", {x: W - R, y: H - 2, "text-anchor": "end", "font-size": 11, fill: "#5b6670"},
       svg).textContent = "step";
    el("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "none",
                stroke: "#9aa4ad"}, svg);
    if (panel.markers) {
      (DATA.anomalies || []).forEach(function (a) {
        if (typeof a.step !== "number" || a.step < x0 || a.step > x1) return;
        var run = a.run === undefined ? null : DATA.runs[a.run];
        var g = el("g", {"class": "anomaly-marker"}, svg);
        if (run) g.setAttribute("data-run", run.label);
        el("title", {}, g).textContent = (run ? run.label + ": " : "") + a.kind + " at step " +
          a.step + " (rank " + a.rank + ")" + (a.message ? ": " + a.message : "");
        el("line", {x1: px(a.step), x2: px(a.step), y1: T, y2: H - B,
                    stroke: run ? run.colour : "#d9534f",
                    "stroke-dasharray": "3 3", "stroke-opacity": 0.7}, g);
        // a wide transparent twin, so the tooltip is easy to hit with the mouse
        el("line", {x1: px(a.step), x2: px(a.step), y1: T, y2: H - B, stroke: "transparent",
                    "stroke-width": 8}, g);
      });
    }
    hlines.forEach(function (h) {
      if (log && h.y <= 0) return;
      el("line", {x1: L, x2: W - R, y1: py(h.y), y2: py(h.y), stroke: "#c0392b",
                  "stroke-dasharray": "8 4"}, svg);
      el("text", {x: W - R - 4, y: py(h.y) - 4, "text-anchor": "end", "font-size": 11,
                  fill: "#c0392b"}, svg).textContent = h.label;
    });
    if (panel.band) band(svg, lines, px, py, log);
    lines.forEach(function (l) {
      var segs = [], cur = [];
      l.y.forEach(function (v, i) {
        if (isFinite(v) && (!log || v > 0)) {
          cur.push(px(l.x[i]).toFixed(1) + "," + py(v).toFixed(1));
          return;
        }
        if (cur.length) segs.push(cur);
        cur = [];
        if (!isFinite(v) && v !== null) {   // NaN / inf: an event, marked on the top edge
          var x = px(l.x[i]);
          var tri = el("path", {d: "M" + (x - 5) + "," + T + "h10l-5,8z", fill: "#c0392b",
                                "class": "nonfinite"}, svg);
          el("title", {}, tri).textContent = l.src.label + ": " + l.src.text[i] + " at step " +
            l.x[i];
        }
      });
      if (cur.length) segs.push(cur);
      segs.forEach(function (s) {
        if (s.length === 1) s.push(s[0]);
        var thin = l.src.faint || l.src.band;
        var poly = el("polyline", {points: s.join(" "), fill: "none", stroke: colour(l.src),
                                   "stroke-width": thin ? 1 : 1.6, "stroke-opacity":
                                   l.src.faint ? 0.4 : 1, "stroke-dasharray":
                                   DASHES[l.src.dash || 0], "stroke-linejoin": "round"}, svg);
        if (l.src.run !== undefined) poly.setAttribute("data-label", l.src.label);
      });
    });
    if (panel.markers) dots(svg, lines, px, py, log, x0, x1);
    hover(svg, box, lines, px, x0, x1);
  }

  // The band between the max ("hi") and min ("lo") edges across ranks: one polygon, the hi
  // edge left to right, then the lo edge back; points that cannot be drawn are left out.
  function band(svg, lines, px, py, log) {
    var hi = null, lo = null;
    lines.forEach(function (l) {
      if (l.src.band === "hi") hi = l;
      if (l.src.band === "lo") lo = l;
    });
    if (!hi || !lo) return;
    function points(l) {
      var out = [];
      l.y.forEach(function (v, i) {
        if (isFinite(v) && (!log || v > 0)) {
          out.push(px(l.x[i]).toFixed(1) + "," + py(v).toFixed(1));
        }
      });
      return out;
    }
    var top = points(hi), bottom = points(lo).reverse();
    if (!top.length || !bottom.length) return;
    el("polygon", {points: top.concat(bottom).join(" "), fill: SPREAD.median,
                   "fill-opacity": 0.18, stroke: "none", "class": "band"}, svg);
  }

  // Several runs: a dot where an anomaly's step falls on a curve of its run and rank, so the
  // curve it belongs to is plain even where the runs' curves cross; one dot for the anomalies
  // of one step. Downsampling keeps every anomaly step, so the point is there unless its value
  // is not finite (then a triangle is).
  function dots(svg, lines, px, py, log, x0, x1) {
    var at = {}, keys = [];
    (DATA.anomalies || []).forEach(function (a) {
      if (a.run === undefined || typeof a.step !== "number" || a.step < x0 || a.step > x1) {
        return;
      }
      var key = a.run + " " + a.rank + " " + a.step;
      if (!at[key]) { at[key] = []; keys.push(key); }
      at[key].push(a);
    });
    keys.forEach(function (key) {
      var found = at[key], a = found[0], run = DATA.runs[a.run];
      var what = found.map(function (f) {
        return f.kind + (f.message ? ": " + f.message : "");
      }).join("\n");
      lines.forEach(function (l) {
        if (l.src.run !== a.run || l.src.rank !== a.rank || !l.x.length) return;
        var i = bisect(l.x, a.step), v = l.y[i];
        if (l.x[i] !== a.step || !isFinite(v) || (log && v <= 0)) return;
        var dot = el("circle", {cx: px(a.step).toFixed(1), cy: py(v).toFixed(1), r: 4.5,
                                fill: "#d9534f", stroke: run.colour, "stroke-width": 2,
                                "class": "anomaly-dot", "data-run": run.label,
                                "data-line": l.src.label, "data-step": a.step}, svg);
        el("title", {}, dot).textContent = l.src.label + " at step " + a.step + ", " +
          l.src.text[i] + "\n" + what;
      });
    });
  }

  // Crosshair and a tooltip with every line's value at the nearest plotted step.
  function hover(svg, box, lines, px, x0, x1) {
    var cross = el("line", {y1: T, y2: H - B, stroke: "#888", visibility: "hidden"}, svg);
    var tip = html("div", "tip", undefined, box);
    tip.style.display = "none";
    svg.addEventListener("mousemove", function (ev) {
      var r = svg.getBoundingClientRect(), sx = (ev.clientX - r.left) * W / r.width;
      if (sx < L || sx > W - R) { svg.onmouseleave(); return; }
      var x = x0 + (sx - L) / (W - L - R) * (x1 - x0), text = [], best = null;
      lines.forEach(function (l) {
        if (!l.x.length) return;
        var i = bisect(l.x, x);
        if (best === null || Math.abs(l.x[i] - x) < Math.abs(best - x)) best = l.x[i];
        text.push(l.src.label + ": " + l.src.text[i] + " (step " + l.x[i] + ")");
      });
      cross.setAttribute("x1", px(best));
      cross.setAttribute("x2", px(best));
      cross.setAttribute("visibility", "visible");
      tip.textContent = text.join("\n");
      tip.style.display = "block";
      var bx = box.getBoundingClientRect();
      tip.style.left = Math.min(ev.clientX - bx.left + 12, bx.width - tip.offsetWidth - 4) + "px";
      tip.style.top = (ev.clientY - bx.top + 12) + "px";
    });
    svg.onmouseleave = function () {
      cross.setAttribute("visibility", "hidden");
      tip.style.display = "none";
    };
  }

  var DATA = JSON.parse(document.getElementById("mw-data").textContent);
  var root = document.getElementById("panels"), main = document.getElementById("report");
  var rendered = 0;
  DATA.panels.forEach(function (panel) {
    try {
      renderPanel(panel, root);
      rendered += 1;
    } catch (e) {   // one broken panel must not hide the others; say what broke
      document.getElementById("errors").textContent += "panel " + panel.id + ": " +
        (e && e.stack ? e.stack : e) + "\n";
    }
  });
  main.setAttribute("data-rendered", String(rendered));
})();
