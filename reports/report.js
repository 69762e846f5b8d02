// fencecheck report: the interactive timeline. Everything shown from the
// history goes into the page through textContent or canvas text, never as
// HTML, so markup in a value stays text.
(function () {
  "use strict";

  var copy = document.getElementById("copy-cmd");
  if (copy) {
    copy.addEventListener("click", function () {
      var text = document.getElementById("cmd").textContent;
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(function () { copy.textContent = "copied"; }, function () {});
      }
    });
  }

  var dataEl = document.getElementById("fc-data");
  var wrap = document.getElementById("tl-wrap");
  if (!dataEl || !wrap) { return; }
  var D = JSON.parse(dataEl.textContent);
  var canvas = document.getElementById("tl-canvas");
  var overlay = document.getElementById("tl-faults");
  var tip = document.getElementById("tl-tip");
  var detail = document.getElementById("tl-detail");
  var windowLabel = document.getElementById("tl-window");
  var SVGNS = "http://www.w3.org/2000/svg";

  var COLORS = ["#2f9e5b", "#d9534f", "#e0a526"];
  var OUTCOME = ["ok", "fail", "info"];
  // Fault lanes: one per nemesis (D.flanes) between the top margin and the
  // clients' rows, each fault drawn in its nemesis's lane only.
  var FLANES = D.flanes || [], FTOP = 18, FLH = 14;
  var GUTTER = 84, TOP = FTOP + FLANES.length * FLH + (FLANES.length ? 6 : 0), AXIS = 24;

  // Decode the columns. Times become ns as doubles (exact far beyond any run).
  var n = D.c.length;
  var call = new Float64Array(n), end = new Float64Array(n), ids = new Float64Array(n);
  var t = 0, id = 0, i;
  for (i = 0; i < n; i++) {
    t += D.c[i];
    id += D.id[i];
    call[i] = t * D.unit;
    ids[i] = id;
    end[i] = D.d[i] < 0 ? D.end : (t + D.d[i]) * D.unit;
  }
  var byId = new Map();
  for (i = 0; i < n; i++) { byId.set(ids[i], i); }
  // A lane is a process's row; past a screenful, lanes are grouped into the
  // drawn rows (D.row maps lane to row, D.lanes labels the rows).
  var lanes = D.row.length, rows = D.lanes.length;
  function rowOf(l) { return D.row[l]; }
  // Operations of a lane never overlap (one process at a time), so each
  // lane is sorted by call and by end: binary search finds the visible window.
  var laneOps = [];
  for (i = 0; i < lanes; i++) { laneOps.push([]); }
  for (i = 0; i < n; i++) { laneOps[D.lane[i]].push(i); }
  laneOps = laneOps.map(function (a) { return Int32Array.from(a); });

  var total = Math.max(D.end, 1);
  var view = { t0: 0, t1: total };
  var highlight = new Set();
  var laneH = rows <= 40 ? 16 : Math.max(3, Math.floor(640 / rows));
  // Density mode (a run too large to embed every operation): per row and
  // time bucket, the operations called there by outcome; the windows
  // around the violations hold every operation.
  var dens = D.dens || null, wins = D.win || [];
  var densMax = 1;
  if (dens) {
    for (i = 0; i < dens.ok.length; i++) { densMax = Math.max(densMax, dens.ok[i] + dens.fail[i] + dens.info[i]); }
  }
  function inWindow(t0, t1) {
    for (var w = 0; w < wins.length; w++) { if (wins[w][0] <= t0 && t1 <= wins[w][1]) { return true; } }
    return false;
  }
  var cssW = 0, cssH = 0;

  function X(tn) { return GUTTER + (tn - view.t0) / (view.t1 - view.t0) * (cssW - GUTTER - 8); }
  function T(x) { return view.t0 + (x - GUTTER) / (cssW - GUTTER - 8) * (view.t1 - view.t0); }

  function fmtS(ns) {
    var span = view.t1 - view.t0;
    var digits = span < 1e7 ? 4 : span < 1e9 ? 3 : 2;
    return (ns / 1e9).toFixed(digits) + " s";
  }
  function fmtDur(ns) {
    if (ns >= 1e9) { return (ns / 1e9).toFixed(2) + " s"; }
    if (ns >= 1e6) { return (ns / 1e6).toFixed(1) + " ms"; }
    return (ns / 1e3).toFixed(0) + " µs";
  }

  function niceStep(span, count) {
    var raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var k = 0; k < steps.length; k++) { if (steps[k] * mag >= raw) { return steps[k] * mag; } }
    return 10 * mag;
  }

  function firstEndingAfter(arr, t0) {
    var lo = 0, hi = arr.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (end[arr[mid]] < t0) { lo = mid + 1; } else { hi = mid; }
    }
    return lo;
  }

  function draw() {
    cssW = wrap.clientWidth || 900;
    cssH = TOP + rows * laneH + AXIS;
    var dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
    canvas.style.height = cssH + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    ctx.font = "11px system-ui, sans-serif";

    for (var l = 0; l < rows; l++) {
      var y = TOP + l * laneH;
      if (l % 2 === 1) { ctx.fillStyle = "#f4f6f9"; ctx.fillRect(GUTTER, y, cssW - GUTTER, laneH); }
      if (laneH >= 10) {
        ctx.fillStyle = "#6a7385";
        ctx.textBaseline = "middle";
        ctx.fillText(D.lanes[l], 4, y + laneH / 2);
      }
    }

    var drawn = 0, bar = Math.max(1, laneH - 4), pad = (laneH - bar) / 2;
    var cells = dens ? drawDensity(ctx, bar, pad) : 0;
    for (l = 0; l < lanes; l++) {
      var arr = laneOps[l];
      var yb = TOP + rowOf(l) * laneH + pad;
      // Adjacent bars of one colour closer than a pixel are merged: a
      // zoomed-out 100k-op row costs a few hundred rectangles, not 100k.
      var runColor = -1, runX0 = 0, runX1 = -1e9;
      for (var j = firstEndingAfter(arr, view.t0); j < arr.length; j++) {
        var k = arr[j];
        if (call[k] > view.t1) { break; }
        var x0 = Math.max(X(call[k]), GUTTER), x1 = Math.max(X(end[k]), x0 + 1);
        var c = D.d[k] < 0 ? 3 : D.o[k];
        drawn++;
        if (c === runColor && x0 <= runX1 + 0.5) { runX1 = Math.max(runX1, x1); continue; }
        if (runColor >= 0) { fillBar(ctx, runColor, runX0, runX1, yb, bar); }
        runColor = c; runX0 = x0; runX1 = x1;
      }
      if (runColor >= 0) { fillBar(ctx, runColor, runX0, runX1, yb, bar); }
    }
    highlight.forEach(function (k) {
      if (end[k] < view.t0 || call[k] > view.t1) { return; }
      var x0 = Math.max(X(call[k]), GUTTER), x1 = Math.max(X(end[k]), x0 + 2);
      ctx.strokeStyle = "#111";
      ctx.lineWidth = 2;
      ctx.strokeRect(x0 - 1, TOP + rowOf(D.lane[k]) * laneH, x1 - x0 + 2, laneH);
    });

    // Time axis.
    var yAxis = TOP + rows * laneH;
    ctx.strokeStyle = "#c9ced8";
    ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(GUTTER, yAxis + 0.5); ctx.lineTo(cssW, yAxis + 0.5); ctx.stroke();
    ctx.fillStyle = "#6a7385";
    ctx.textBaseline = "top";
    ctx.textAlign = "center";
    var step = niceStep(view.t1 - view.t0, Math.max(2, Math.floor((cssW - GUTTER) / 110)));
    for (var tt = Math.ceil(view.t0 / step) * step; tt <= view.t1; tt += step) {
      var xt = X(tt);
      ctx.beginPath(); ctx.moveTo(xt + 0.5, yAxis); ctx.lineTo(xt + 0.5, yAxis + 4); ctx.stroke();
      ctx.fillText(fmtS(tt), xt, yAxis + 6);
    }
    ctx.textAlign = "left";

    drawFaults();
    wrap.setAttribute("data-drawn-ops", String(drawn));
    wrap.setAttribute("data-density-cells", String(cells));
    var what = drawn + " operations in view";
    if (dens) {
      what = inWindow(view.t0, view.t1) ? drawn + " operations in view, every one (a window around a violation)"
        : "density of every operation (darker: more per bucket)" + (drawn ? ", " + drawn + " shown one by one in the shaded windows" : "");
    }
    windowLabel.textContent = "showing " + fmtS(view.t0) + " – " + fmtS(view.t1) + " · " + what;
  }

  // The density view: each row's buckets in view, one rectangle per
  // bucket, split by outcome (ok, fail, unknown) and darker for more
  // operations; the windows with every operation are shaded behind.
  function drawDensity(ctx, bar, pad) {
    var B = dens.b, bw = total / B, cells = 0;
    ctx.fillStyle = "rgba(25,113,194,0.08)";
    wins.forEach(function (w) {
      if (w[1] < view.t0 || w[0] > view.t1) { return; }
      var x0 = Math.max(X(w[0]), GUTTER), x1 = Math.min(X(w[1]), cssW);
      ctx.fillRect(x0, TOP, Math.max(x1 - x0, 1), rows * laneH);
    });
    var b0 = Math.max(0, Math.floor(view.t0 / bw)), b1 = Math.min(B - 1, Math.floor(view.t1 / bw));
    for (var r = 0; r < rows; r++) {
      var yb = TOP + r * laneH + pad;
      for (var b = b0; b <= b1; b++) {
        var c = r * B + b, ok = dens.ok[c], fail = dens.fail[c], info = dens.info[c], n = ok + fail + info;
        if (n === 0) { continue; }
        if (inWindow(b * bw, (b + 1) * bw)) { continue; } // drawn one by one
        var x0 = Math.max(X(b * bw), GUTTER), x1 = Math.max(X((b + 1) * bw), x0 + 1);
        ctx.globalAlpha = 0.3 + 0.7 * Math.log(1 + n) / Math.log(1 + densMax);
        var y = yb, h;
        if (fail) { h = Math.max(1, bar * fail / n); ctx.fillStyle = COLORS[1]; ctx.fillRect(x0, y, x1 - x0, h); y += h; }
        if (info) { h = Math.max(1, bar * info / n); ctx.fillStyle = COLORS[2]; ctx.fillRect(x0, y, x1 - x0, h); y += h; }
        if (y < yb + bar) { ctx.fillStyle = COLORS[0]; ctx.fillRect(x0, y, x1 - x0, yb + bar - y); }
        cells++;
      }
    }
    ctx.globalAlpha = 1;
    return cells;
  }

  function fillBar(ctx, c, x0, x1, y, h) {
    if (c === 3) { // never completed: an unknown outcome that stays open to the end
      ctx.fillStyle = "rgba(224,165,38,0.35)";
      ctx.fillRect(x0, y, x1 - x0, h);
      ctx.fillStyle = COLORS[2];
      ctx.fillRect(x0, y, Math.min(3, x1 - x0), h);
      return;
    }
    ctx.fillStyle = COLORS[c];
    ctx.fillRect(x0, y, x1 - x0, h);
  }

  // Fault periods are SVG over the canvas so each band is an element with a
  // title (hover) and the test can find them.
  function drawFaults() {
    while (overlay.firstChild) { overlay.removeChild(overlay.firstChild); }
    overlay.setAttribute("width", cssW);
    overlay.setAttribute("height", cssH);
    overlay.setAttribute("viewBox", "0 0 " + cssW + " " + cssH);
    var h = rows * laneH + TOP;
    FLANES.forEach(function (name, i) {
      var bg = document.createElementNS(SVGNS, "rect");
      bg.setAttribute("class", "fault-lane");
      bg.setAttribute("data-nemesis", name);
      bg.setAttribute("x", GUTTER); bg.setAttribute("y", FTOP + i * FLH);
      bg.setAttribute("width", Math.max(cssW - GUTTER, 1)); bg.setAttribute("height", FLH - 2);
      overlay.appendChild(bg);
      var name_ = document.createElementNS(SVGNS, "text");
      name_.setAttribute("class", "fault-lane-name");
      name_.setAttribute("x", 4); name_.setAttribute("y", FTOP + i * FLH + FLH - 4);
      name_.textContent = name;
      overlay.appendChild(name_);
    });
    var labelEnd = FLANES.map(function () { return -1e9; });
    (D.faults || []).forEach(function (f) {
      if (f.e < view.t0 || f.s > view.t1) { return; }
      var x0 = Math.max(X(f.s), GUTTER), x1 = Math.min(X(f.e), cssW);
      var ln = f.ln || 0, y = FTOP + ln * FLH;
      var el;
      if (f.e === f.s) {
        el = document.createElementNS(SVGNS, "line");
        el.setAttribute("class", "fault-mark");
        el.setAttribute("x1", x0); el.setAttribute("x2", x0);
        el.setAttribute("y1", y); el.setAttribute("y2", y + FLH - 2);
        el.setAttribute("stroke", f.c);
      } else {
        el = document.createElementNS(SVGNS, "rect");
        el.setAttribute("class", "fault-band");
        el.setAttribute("data-lane", String(ln));
        el.setAttribute("x", x0); el.setAttribute("y", y);
        el.setAttribute("width", Math.max(x1 - x0, 1)); el.setAttribute("height", FLH - 2);
        el.setAttribute("fill", f.c);
      }
      var title = document.createElementNS(SVGNS, "title");
      title.textContent = f.l + ": " + (f.s / 1e9).toFixed(2) + " s – " + (f.open ? "end (never stopped)" : (f.e / 1e9).toFixed(2) + " s");
      el.appendChild(title);
      overlay.appendChild(el);
      // A label only where it fits inside its band and after the lane's
      // previous label: labels never run together.
      var text = f.l.length > 40 ? f.l.slice(0, 39) + "…" : f.l, w = text.length * 6 + 6;
      if (f.e !== f.s && x1 - x0 > w && x0 > labelEnd[ln]) {
        var label = document.createElementNS(SVGNS, "text");
        label.setAttribute("class", "fault-label");
        label.setAttribute("x", x0 + 3);
        label.setAttribute("y", y + FLH - 4);
        label.textContent = text;
        overlay.appendChild(label);
        labelEnd[ln] = x0 + w;
      }
    });
    // Where each violation became visible: a red mark the eye finds at once.
    (D.anom || []).forEach(function (a) {
      if (a.at < view.t0 || a.at > view.t1) { return; }
      var x = X(a.at);
      var g = document.createElementNS(SVGNS, "g");
      g.setAttribute("class", "anomaly-mark");
      var line = document.createElementNS(SVGNS, "line");
      line.setAttribute("x1", x); line.setAttribute("x2", x);
      line.setAttribute("y1", 4); line.setAttribute("y2", h);
      var tri = document.createElementNS(SVGNS, "path");
      tri.setAttribute("d", "M" + (x - 5) + " 2L" + (x + 5) + " 2L" + x + " 11Z");
      var title = document.createElementNS(SVGNS, "title");
      title.textContent = a.k + " visible at " + (a.at / 1e9).toFixed(3) + " s";
      g.appendChild(line); g.appendChild(tri); g.appendChild(title);
      overlay.appendChild(g);
    });
  }

  function opAt(px, py) {
    var r = Math.floor((py - TOP) / laneH);
    if (r < 0 || r >= rows || px < GUTTER) { return -1; }
    var tol = 3 * (view.t1 - view.t0) / (cssW - GUTTER);
    var tm = T(px);
    for (var l = 0; l < lanes; l++) {
      if (rowOf(l) !== r) { continue; }
      var arr = laneOps[l];
      for (var j = firstEndingAfter(arr, tm - tol); j < arr.length; j++) {
        var k = arr[j];
        if (call[k] > tm + tol) { break; }
        return k;
      }
    }
    return -1;
  }

  function describe(k) {
    var lines = [];
    lines.push("op " + ids[k] + " · process " + D.p[k] + " · " + D.fs[D.f[k]] + " " + D.keys[D.k[k]]);
    var parts = [];
    if (D.tok[k]) { parts.push("token " + D.tok[k]); }
    if (D.val[k]) { parts.push("value " + D.val[k]); }
    if (parts.length) { lines.push(parts.join(" · ")); }
    var outcome = OUTCOME[D.o[k]];
    if (D.err[k]) { outcome += " (" + D.err[k] + ")"; }
    lines.push("outcome " + outcome);
    if (D.d[k] < 0) {
      lines.push("called " + (call[k] / 1e9).toFixed(4) + " s, never completed: may take effect at any later time");
    } else if (D.o[k] === 2) {
      lines.push("called " + (call[k] / 1e9).toFixed(4) + " s, gave up at " + (end[k] / 1e9).toFixed(4) + " s: may take effect at any later time");
    } else {
      lines.push("called " + (call[k] / 1e9).toFixed(4) + " s, returned " + (end[k] / 1e9).toFixed(4) + " s (" + fmtDur(end[k] - call[k]) + ")");
    }
    return lines.join("\n");
  }

  function setView(t0, t1) {
    var span = Math.max(t1 - t0, 1e4);
    span = Math.min(span, total);
    t0 = Math.max(0, Math.min(t0, total - span));
    view.t0 = t0; view.t1 = t0 + span;
    draw();
  }

  function zoom(factor, atX) {
    var center = atX === undefined ? (view.t0 + view.t1) / 2 : T(atX);
    var span = (view.t1 - view.t0) * factor;
    var frac = (center - view.t0) / (view.t1 - view.t0);
    setView(center - frac * span, center - frac * span + span);
  }

  function focusOps(list) {
    var ks = [];
    list.forEach(function (opId) { if (byId.has(opId)) { ks.push(byId.get(opId)); } });
    highlight = new Set(ks);
    if (!ks.length) { draw(); return; }
    var a = Infinity, b = -Infinity;
    ks.forEach(function (k) { a = Math.min(a, call[k]); b = Math.max(b, D.d[k] < 0 ? call[k] : end[k]); });
    var padT = Math.max((b - a) * 0.25, 2e7);
    setView(a - padT, b + padT);
    document.getElementById("timeline").scrollIntoView({ block: "start" });
  }

  function parseOps(s) {
    return (s || "").split(/\s+/).filter(Boolean).map(Number).filter(function (v) { return !isNaN(v); });
  }

  document.querySelectorAll("[data-tl]").forEach(function (b) {
    b.addEventListener("click", function () {
      var span = view.t1 - view.t0;
      switch (b.getAttribute("data-tl")) {
        case "in": zoom(0.5); break;
        case "out": zoom(2); break;
        case "left": setView(view.t0 - span / 2, view.t1 - span / 2); break;
        case "right": setView(view.t0 + span / 2, view.t1 + span / 2); break;
        default: highlight = new Set(); setView(0, total);
      }
    });
  });

  document.querySelectorAll("a.show-ops").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      ev.preventDefault();
      document.querySelectorAll(".anomaly.selected").forEach(function (e) { e.classList.remove("selected"); });
      var li = a.closest(".anomaly");
      if (li) { li.classList.add("selected"); }
      focusOps(parseOps(a.getAttribute("data-ops")));
    });
  });

  function fromHash() {
    var m = /^#op-(\d+)$/.exec(location.hash);
    if (m) { focusOps([Number(m[1])]); }
  }
  window.addEventListener("hashchange", fromHash);

  var drag = null;
  wrap.addEventListener("mousedown", function (ev) {
    drag = { x: ev.clientX, t0: view.t0, t1: view.t1, moved: false };
    wrap.classList.add("dragging");
  });
  window.addEventListener("mouseup", function (ev) {
    if (drag && !drag.moved) {
      var r = canvas.getBoundingClientRect();
      var k = opAt(ev.clientX - r.left, ev.clientY - r.top);
      if (k >= 0 && ev.target === canvas) {
        detail.hidden = false;
        detail.textContent = describe(k);
        highlight = new Set([k]);
        draw();
      }
    }
    drag = null;
    wrap.classList.remove("dragging");
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) { return; }
    var dx = ev.clientX - drag.x;
    if (Math.abs(dx) > 2) { drag.moved = true; }
    var dt = dx / (cssW - GUTTER - 8) * (drag.t1 - drag.t0);
    setView(drag.t0 - dt, drag.t1 - dt);
  });
  canvas.addEventListener("mousemove", function (ev) {
    if (drag) { tip.hidden = true; return; }
    var r = canvas.getBoundingClientRect();
    var px = ev.clientX - r.left, py = ev.clientY - r.top;
    var k = opAt(px, py);
    if (k < 0) { tip.hidden = true; return; }
    tip.textContent = describe(k);
    tip.hidden = false;
    var left = px + 14;
    if (left + 320 > cssW) { left = Math.max(0, px - 330); }
    tip.style.left = left + "px";
    tip.style.top = Math.min(py + 14, cssH - 10) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
  canvas.addEventListener("dblclick", function (ev) {
    var r = canvas.getBoundingClientRect();
    zoom(ev.shiftKey ? 2 : 0.5, ev.clientX - r.left);
  });
  canvas.addEventListener("wheel", function (ev) {
    if (!ev.ctrlKey && !ev.metaKey) { return; } // plain wheel scrolls the page
    ev.preventDefault();
    var r = canvas.getBoundingClientRect();
    zoom(ev.deltaY > 0 ? 1.25 : 0.8, ev.clientX - r.left);
  }, { passive: false });

  var resizeTimer = 0;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(draw, 100);
  });

  draw();
  fromHash();
})();
